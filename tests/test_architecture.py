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


BLOCKED = ("django", "rest_framework", "celery", "channels")
WITHOUT_DJANGO = f"""
import sys
from importlib.abc import MetaPathFinder

class Blocked(MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {BLOCKED!r}:
            raise ImportError(f"{{name}} is blocked")
        return None

sys.meta_path.insert(0, Blocked())
from datetime import UTC, datetime
import lab.simulator as simulator
import detection.core.diagnosis, remediation.core.policy, fleet.core.taxonomy

cluster = simulator.SimulatedCluster(
    simulator.SimulationConfig(start_time=datetime(2026, 12, 1, tzinfo=UTC), nodes=8)
)
lines = list(cluster.advance(600))
print(len(lines), len(cluster.snapshot().jobs), len(cluster.gpu_metrics()))
"""


def test_the_simulator_and_the_pure_core_run_with_django_and_celery_blocked() -> None:
    result = run(sys.executable, "-c", WITHOUT_DJANGO)
    assert result.returncode == 0, result.stderr
    lines, jobs, samples = (int(n) for n in result.stdout.split())
    assert lines > 0 and jobs > 0 and samples > 0


# Each floor is a top-level package; the Django project package sits on top of all of them.
FLOORS = ("recovery_console", "remediation", "detection", "fleet")
TOOLS = "lab"
LONGEST_MODULE = 500


def source_files() -> list[Path]:
    return [
        path
        for package in (*FLOORS, TOOLS)
        for path in (ROOT / package).rglob("*.py")
        if "migrations" not in path.parts
    ]


def test_the_layers_contract_names_the_four_floors_by_their_packages() -> None:
    config = (ROOT / "pyproject.toml").read_text()
    contract = config[config.index('type = "layers"') :]
    listed = contract[contract.index("[") + 1 : contract.index("]")]
    assert [name.strip(' "\n') for name in listed.split(",") if name.strip()] == list(FLOORS)
    assert all((ROOT / floor / "__init__.py").exists() for floor in (*FLOORS, TOOLS))


def test_no_source_module_is_over_500_lines() -> None:
    long = {
        str(path.relative_to(ROOT)): lines
        for path in source_files()
        if (lines := len(path.read_text().splitlines())) > LONGEST_MODULE
    }
    assert not long, f"split these by what their parts do: {long}"
