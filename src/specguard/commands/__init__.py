"""Command handlers: one module per `specguard` command (inspect, route, lint, rule, watch).

Each parses nothing itself (cli.py does), calls the stages, and prints.
"""
