"""Presentation shared by inspect, route and lint: run-length grouping, tables."""
