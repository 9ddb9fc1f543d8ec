"""swarm's pytest plugin, as a user's project meets it: installed with swarm (a `pytest11`
entry point), loaded in every pytest session of the environment, changing no test until
asked. Each test runs pytest in a subprocess on a project of its own in `tmp_path`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from swarm._sandbox._interpreter import prefixes

TESTS = """\
import socket
ORIGINAL = socket.getaddrinfo

def test_untouched():
    assert socket.getaddrinfo is ORIGINAL

def test_asked(block_network):
    assert socket.getaddrinfo is not ORIGINAL
"""

BLOCKED = """\
import socket
ORIGINAL = socket.getaddrinfo

def test_blocked():
    assert socket.getaddrinfo is not ORIGINAL
"""


def _pytest(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args]
    return subprocess.run(command, cwd=project, capture_output=True, text=True, timeout=120)


def _project(root: Path, ini: str, tests: str, conftest: str | None = None) -> Path:
    root.mkdir()
    (root / "pytest.ini").write_text(f"[pytest]\naddopts = --strict-config\n{ini}")
    (root / "test_it.py").write_text(tests)
    if conftest is not None:
        (root / "conftest.py").write_text(conftest)
    return root


def test_installed_it_changes_no_test_until_asked(tmp_path: Path) -> None:
    done = _pytest(_project(tmp_path / "p", "", TESTS))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed" in done.stdout


def test_the_setting_or_the_flag_blocks_every_test(tmp_path: Path) -> None:
    by_setting = _pytest(_project(tmp_path / "ini", "swarm_block_network = true\n", BLOCKED))
    assert by_setting.returncode == 0, by_setting.stdout + by_setting.stderr
    by_flag = _pytest(_project(tmp_path / "flag", "", BLOCKED), "--swarm-block-network")
    assert by_flag.returncode == 0, by_flag.stdout + by_flag.stderr


def test_a_conftest_naming_it_is_not_loaded_twice_and_blocks_as_before(tmp_path: Path) -> None:
    conftest = 'pytest_plugins = ["swarm.pytest_plugin"]\n'
    done = _pytest(_project(tmp_path / "p", "", BLOCKED, conftest))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout


def test_loading_it_imports_none_of_swarms_code() -> None:
    """pytest imports it in every session: only swarm's (lazy) package and the plugin."""
    probe = "import sys, swarm.pytest_plugin; print(sorted(m for m in sys.modules if 'swarm' in m))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["['swarm',", "'swarm.pytest_plugin']"], done.stderr


def test_a_sandbox_shows_swarms_package_to_its_own_interpreter() -> None:
    """Installed from a checkout (editable), swarm is imported from outside the venv: a
    sandboxed check's pytest under that venv loads the plugin, so it must see the package
    (every check failed to start when it did not)."""
    package = Path(__file__).parents[1] / "swarm"
    shown = prefixes(Path(sys.executable))
    assert any(package.resolve().is_relative_to(p) for p in shown)
    assert Path(__file__).parents[1].resolve() not in shown  # the package, not the checkout
