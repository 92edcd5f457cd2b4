"""The public API (`import specguard`), its error hierarchy, and the one usage-error style."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version

import pytest

import specguard
from specguard.cli import main
from specguard.errors import ConfigError, LayoutError, SpecguardError, UsageError


def test_every_public_name_resolves():
    for name in specguard.__all__:
        assert getattr(specguard, name) is not None, name
    assert specguard.lint_resolvers is specguard.lint.lint
    with pytest.raises(AttributeError):
        specguard.no_such_name  # noqa: B018


def test_version_comes_from_the_installed_metadata():
    assert specguard.__version__ == version("specguard")


def test_importing_specguard_loads_neither_torch_nor_the_stages():
    code = ("import sys, specguard; specguard.Resolver; "
            "print(sorted(m for m in ('torch', 'specguard.guard', 'specguard.lint') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"  # Resolver needs neither lint nor the guard


def test_user_errors_share_one_base():
    for cls in (specguard.CheckpointError, ConfigError, LayoutError, UsageError):
        assert issubclass(cls, SpecguardError)
    with pytest.raises(SpecguardError, match="no such file"):
        specguard.Resolver.open("/nonexistent/checkpoint")


@pytest.mark.parametrize(("argv", "prefix"), [
    (["--no-such-option"], "specguard: error: "),
    (["lint", "--fail-on", "fatal"], "specguard: error: "),
    (["factory", "s1"], "specguard: error: "),
    (["factory", "no-such-scenario", "/nonexistent/out"], "specguard: error: "),
])
def test_usage_errors_are_one_line_with_the_command_as_prefix(argv, prefix, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(prefix) and err.count("\n") == 1, err


def test_dir_and_help_show_the_lazy_api_and_no_plumbing():
    import pydoc

    names = dir(specguard)
    assert {"Resolver", "Route", "LoadGuard", "open_checkpoint", "lint_resolvers"} <= set(names)
    assert not {"Any", "TYPE_CHECKING", "import_module"} & set(names)
    page = pydoc.render_doc(specguard, renderer=pydoc.plaintext)
    for name in ("Resolver", "Route", "LoadGuard", "open_checkpoint", "lint_resolvers"):
        assert name in page, name
    for plumbing in ("TYPE_CHECKING", "import_module", "typing.Any"):
        assert plumbing not in page, plumbing


def test_every_public_name_is_documented_in_the_package_docstring():
    doc = specguard.__doc__ or ""
    assert all(f"``{name}``" in doc for name in specguard.__all__)
