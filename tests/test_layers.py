"""The layer contract in pyproject.toml ([tool.importlinter]), checked by
import-linter: imports point down only (face -> tracing -> runtime ->
transports and discovery -> engine -> wire -> pure), type-only imports included."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("importlinter", reason="import-linter is a test dependency")

ROOT = Path(__file__).resolve().parent.parent
# In a process of its own: import-linter configures logging, which the log tests would then miss.
LINT = "import sys; from importlinter.cli import lint_imports; sys.exit(lint_imports(config_filename=sys.argv[1], no_cache=True, no_logo=True))"


def lint(config: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", LINT, str(config)], cwd=cwd, capture_output=True, text=True,
                          timeout=120, env={"PYTHONPATH": str(cwd), "PATH": ""})


def test_imports_point_down_the_layers() -> None:
    done = lint(ROOT / "pyproject.toml", ROOT)
    assert done.returncode == 0, done.stdout + done.stderr


def test_an_upward_import_under_type_checking_breaks_the_contract(tmp_path: Path) -> None:
    """The couplings that matter most hide under TYPE_CHECKING: the contract counts them."""
    config = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert "exclude_type_checking_imports = false" in config
    package = tmp_path / "layered"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "high.py").write_text("from .low import LOW\n")
    (package / "low.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .high import HIGH\nLOW = 1\n"
    )
    (tmp_path / "setup.cfg").write_text(
        "[importlinter]\nroot_package = layered\nexclude_type_checking_imports = False\n\n"
        "[importlinter:contract:layers]\nname = layers\ntype = layers\nlayers =\n    layered.high\n    layered.low\n"
    )
    done = lint(tmp_path / "setup.cfg", tmp_path)
    assert done.returncode == 1 and "layered.low -> layered.high" in done.stdout, done.stdout + done.stderr
