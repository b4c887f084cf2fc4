"""The README's production settings are all that production needs: its block, run as written in
bash with nothing else in the environment (this test's own directory for the two secrets), then
``manage.py check --deploy`` must pass without a warning. A variable that production needs and
the block forgets fails here as ``ImproperlyConfigured``, as it would for a newcomer."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MARKER = "<!-- production-settings"


def production_block() -> str:
    text = (ROOT / "README.md").read_text()
    assert MARKER in text, "the README lost its production settings block"
    match = re.search(r"```sh\n(.*?)```", text[text.index(MARKER) :], re.DOTALL)
    assert match, "no sh block after the production settings marker"
    return match.group(1)


def run_under_the_block(command: str, secrets: Path) -> subprocess.CompletedProcess[str]:
    block = production_block()
    assert "/run/secrets" in block, "the block no longer keeps its secrets in /run/secrets"
    script = "set -euo pipefail\n" + block.replace("/run/secrets", str(secrets)) + command
    # Nothing but what a login shell has: no DJANGO_*, DATABASE_URL or keys from this process.
    bare = {"PATH": os.environ["PATH"], "HOME": str(secrets.parent), "LANG": "C.UTF-8"}
    return subprocess.run(
        ["bash", "-c", script], cwd=ROOT, env=bare, capture_output=True, text=True, check=False
    )


def test_the_readme_production_block_alone_passes_the_deploy_check(tmp_path: Path) -> None:
    check = f"\n{shlex.quote(sys.executable)} manage.py check --deploy --fail-level WARNING\n"
    done = run_under_the_block(check, tmp_path / "secrets")
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    assert "System check identified no issues" in done.stdout
    assert (tmp_path / "secrets" / "rc-audit-hmac-key").stat().st_size > 0


def test_without_the_audit_key_the_same_block_is_refused_by_name(tmp_path: Path) -> None:
    check = (
        "\nunset AUDIT_HMAC_KEY_FILE\n"
        f"{shlex.quote(sys.executable)} manage.py check --deploy --fail-level WARNING\n"
    )
    done = run_under_the_block(check, tmp_path / "secrets")
    assert done.returncode != 0
    assert "AUDIT_HMAC_KEY (or AUDIT_HMAC_KEY_FILE) must be set when DEBUG is off" in done.stderr
