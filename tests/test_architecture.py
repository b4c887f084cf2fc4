"""The layering DESIGN.md asks for, checked on every run."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)


def test_the_pure_core_imports_nothing_from_django() -> None:
    result = run(str(Path(sys.executable).with_name("lint-imports")))
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_model_change_has_its_migration() -> None:
    result = run(sys.executable, "manage.py", "makemigrations", "--check", "--dry-run")
    assert result.returncode == 0, result.stdout + result.stderr
