"""What the published package declares, read from pyproject.toml and the
sources (nothing is built or imported here; .ci/run builds the wheel, checks
it with twine and smoke-tests it in a fresh venv).

* Every third-party module ``zmesh/`` imports is a declared dependency (or,
  for optional features, in an extra): ``ifaddr`` once arrived only through
  zeroconf.
* The licence is an SPDX expression with its file shipped, the Python
  versions in the classifiers are the ones ``requires-python`` admits, and
  the README's links work where the README is read off the repository (PyPI).
"""

from __future__ import annotations

import ast
import re
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - the 3.10 run
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT: dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
PROJECT: dict[str, Any] = PYPROJECT["project"]

# Import name -> the distributions that provide it, where the names differ
# and the distribution may not be installed where the test runs (extras).
DISTRIBUTIONS_OF = {
    "zmq": {"pyzmq"},
    "yaml": {"PyYAML"},
    "opentelemetry": {"opentelemetry-api", "opentelemetry-sdk"},  # a namespace package
    "nats": {"nats-py"},
    "paho": {"paho-mqtt"},  # a namespace package: Python 3.10's packages_distributions() misses it
    "a2a": {"a2a-sdk"},
    "google": {"protobuf"},  # google.protobuf, in the namespace package google
}

OLDEST, NEWEST = (3, 10), (3, 13)


def normalise(name: str) -> str:
    """PEP 503 name normalisation."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(requirement: str) -> str:
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    assert match, f"unparsable requirement {requirement!r}"
    return normalise(match.group(1))


def declared() -> tuple[set[str], set[str]]:
    """(required distributions, distributions only in an extra)."""
    required = {requirement_name(r) for r in PROJECT["dependencies"]}
    extras = {requirement_name(r) for reqs in PROJECT["optional-dependencies"].values() for r in reqs}
    return required, extras - required


def third_party_imports(package: Path) -> dict[str, set[str]]:
    """Top-level third-party module -> the files importing it (relative imports
    and the standard library left out)."""
    stdlib = set(sys.stdlib_module_names)
    found: dict[str, set[str]] = {}
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top not in stdlib and top != package.name:
                    found.setdefault(top, set()).add(str(path.relative_to(package.parent)))
    return found


def distributions_of(module: str) -> set[str]:
    """Every distribution that may provide ``module`` (most are named as it)."""
    names = {module, *DISTRIBUTIONS_OF.get(module, ()), *metadata.packages_distributions().get(module, ())}
    return {normalise(name) for name in names}


def test_every_third_party_import_is_declared() -> None:
    required, optional = declared()
    imports = third_party_imports(ROOT / "zmesh")
    assert {"zmq", "msgpack", "zeroconf", "ifaddr"} <= set(imports)
    undeclared = {
        module: sorted(files)
        for module, files in imports.items()
        if not distributions_of(module) & (required | optional)
    }
    assert not undeclared, (
        f"imported but not declared in pyproject.toml (dependencies or an extra): {undeclared}"
    )


def test_core_dependencies_are_required_not_optional() -> None:
    required, _ = declared()
    assert {"pyzmq", "msgpack", "zeroconf", "ifaddr"} <= required


def test_license_is_spdx_and_its_file_ships() -> None:
    assert PROJECT["license"] == "MIT"
    assert PROJECT["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert text.startswith("MIT License") and "Copyright (c) 2026 zmesh authors" in text
    requires = PYPROJECT["build-system"]["requires"]
    assert any(re.fullmatch(r"setuptools>=(\d+)", r) and int(r.split(">=")[1]) >= 77 for r in requires)


def test_python_versions_declared_are_the_ones_admitted() -> None:
    assert PROJECT["requires-python"] == f">={OLDEST[0]}.{OLDEST[1]}"
    prefix = "Programming Language :: Python :: 3."
    minors = sorted(int(c[len(prefix):]) for c in PROJECT["classifiers"] if re.fullmatch(r".*:: 3\.\d+", c))
    assert minors == list(range(OLDEST[1], NEWEST[1] + 1))


def test_project_urls_point_at_the_repository() -> None:
    urls = PROJECT["urls"]
    assert {"Homepage", "Documentation", "Source", "Issues", "Changelog"} <= set(urls)
    for url in urls.values():
        assert url.startswith("https://github.com/zmesh-agents/zmesh"), url


@pytest.mark.parametrize("name", ["README.md", "CHANGELOG.md"])
def test_links_work_off_the_repository(name: str) -> None:
    """PyPI shows README.md on its own: a relative link there is dead."""
    text = (ROOT / name).read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)\s]+)\)", text)
    relative = [t for t in targets if not t.startswith(("https://", "http://", "#"))]
    assert not relative, f"{name} has links that only work inside the repository: {relative}"
    base = "https://github.com/zmesh-agents/zmesh/blob/main/"
    for target in targets:
        if target.startswith(base):
            path = target[len(base):].split("#")[0]
            assert (ROOT / path).exists(), f"{name} links to {target}, but {path} does not exist"
