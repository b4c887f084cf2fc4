"""The memory bounds the README promises, measured: each hostile input is ten times its limit and
goes to a child process, whose peak resident memory (``ru_maxrss``) must stay far below what
holding the input would take. A child that only loads the same code gives the baseline. Each of
these fails when its limit is taken away (the input would then be held whole)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from django.conf import settings

ROOT = Path(__file__).resolve().parents[1]
MB = 1024 * 1024


def child(code: str, stdin_bytes: int = 0) -> dict[str, object]:
    """Run ``code`` in a fresh Python; it prints one JSON object, to which the child's peak
    resident memory in MB is added."""
    program = code + textwrap.dedent(
        """
        import json as _json, resource as _resource, sys as _sys
        RESULT["peak_mb"] = _resource.getrusage(_resource.RUSAGE_SELF).ru_maxrss / 1024
        _sys.stdout.write(_json.dumps(RESULT))
        """
    )
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "DJANGO_SETTINGS_MODULE": "recovery_console.settings",
    }
    process = subprocess.Popen(
        [sys.executable, "-c", program],
        cwd=ROOT,
        env=env,
        stdin=subprocess.PIPE if stdin_bytes else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    if stdin_bytes:
        assert process.stdin is not None
        line = b"W1203 worker: step 1 of many, all is well, nothing to see here at all\n" * 16384
        sent = 0
        try:
            while sent < stdin_bytes:
                process.stdin.write(line)
                sent += len(line)
            process.stdin.close()
        except BrokenPipeError:
            pass  # the child stopped reading: its exit status and stderr say why
        process.stdin = None  # written and closed: communicate must not flush it
    out, err = process.communicate(timeout=600)
    assert process.returncode == 0, err.decode()[-2000:]
    return json.loads(out.decode().strip().splitlines()[-1])


def test_diagnose_reads_ten_times_its_input_limit_from_stdin_in_bounded_memory() -> None:
    from remediation.management.commands.diagnose import MAX_INPUT_BYTES

    setup = (
        "import django; django.setup()\n"
        "from django.core.management import call_command\n"
        "import io, contextlib, json\n"
    )
    baseline = child(setup + "RESULT = {}\n")
    hostile = child(
        setup
        + "out = io.StringIO()\n"
        + 'call_command("diagnose", "-", stdout=out)\n'
        + 'RESULT = {"verdict": json.loads(out.getvalue().strip().splitlines()[-1])}\n',
        stdin_bytes=10 * MAX_INPUT_BYTES,
    )
    assert hostile["verdict"]["kind"] == "none"
    # Holding the input would take 320 MB; the last 32 MB and their lines take a few times that.
    grown = float(hostile["peak_mb"]) - float(baseline["peak_mb"])
    assert grown < 6 * MAX_INPUT_BYTES / MB, (baseline, hostile)


def test_a_hostlist_of_ten_times_the_limit_is_refused_without_expanding_it() -> None:
    from remediation.controller.hostlist import MAX_HOSTS

    setup = "from remediation.controller.hostlist import expand_hostlist\n"
    baseline = child(setup + "RESULT = {}\n")
    hostile = child(
        setup
        + f"""
try:
    expand_hostlist("gpu-node-[0-{10 * MAX_HOSTS - 1}]")
    RESULT = {{"refused": False}}
except ValueError as exc:
    RESULT = {{"refused": True, "why": str(exc)}}
"""
    )
    assert hostile["refused"] and str(MAX_HOSTS) in str(hostile["why"])
    # A million names would take some 80 MB.
    assert float(hostile["peak_mb"]) - float(baseline["peak_mb"]) < 16, (baseline, hostile)


# A request body streamed to Django's own handler from a generator, so the child holds none of
# it unless the code under test does.
STREAMED_REQUEST = """
import django; django.setup()
import io
from django.core.handlers.wsgi import WSGIHandler

class Stream(io.RawIOBase):
    def __init__(self, head, filler, size, tail):
        self.parts, self.left = [head], size
        self.filler, self.tail = filler, tail
    def readable(self):
        return True
    def readinto(self, buffer):
        if not self.parts:
            if self.left > 0:
                chunk = self.filler[: min(len(self.filler), self.left)]
                self.left -= len(chunk)
                self.parts.append(chunk)
            elif self.tail is not None:
                self.parts.append(self.tail)
                self.tail = None
            else:
                return 0
        chunk = self.parts.pop(0)
        n = min(len(buffer), len(chunk))
        buffer[:n] = chunk[:n]
        if n < len(chunk):
            self.parts.insert(0, chunk[n:])
        return n

def call(path, content_type, head, filler, size, tail, extra=None):
    length = len(head) + size + len(tail)
    environ = {
        "REQUEST_METHOD": "POST", "PATH_INFO": path, "SERVER_NAME": "localhost",
        "SERVER_PORT": "80", "wsgi.url_scheme": "http", "CONTENT_TYPE": content_type,
        "CONTENT_LENGTH": str(length),
        "wsgi.input": io.BufferedReader(Stream(head, filler, size, tail)),
        "wsgi.errors": io.StringIO(), **(extra or {}),
    }
    status = []
    body = b"".join(WSGIHandler()(environ, lambda s, h: status.append(s)))
    return status[0], body
"""


def test_a_json_body_of_ten_times_the_upload_limit_is_refused_before_it_is_read() -> None:
    limit = settings.MAX_UPLOAD_BYTES
    baseline = child(STREAMED_REQUEST + "RESULT = {}\n")
    hostile = child(
        STREAMED_REQUEST
        + f"""
status, body = call(
    "/api/v1/advisor/research/snapshots", "application/json",
    b'{{"jobs": [', b'{{"id": "1", "state": "RUNNING"}},' * 1024, {10 * limit},
    b'{{}}], "nodes": []}}',
)
RESULT = {{"status": status, "body": body.decode()}}
"""
    )
    assert hostile["status"].startswith("413"), hostile
    assert "MAX_UPLOAD_BYTES" in str(hostile["body"])
    assert float(hostile["peak_mb"]) - float(baseline["peak_mb"]) < limit / MB, (
        baseline,
        hostile,
    )


# The Test signals page as a signed-in viewer sees it, on a database of the child's own.
SIGNED_IN = (
    """
import os, tempfile
os.environ["DATABASE_URL"] = "sqlite:///" + tempfile.mkdtemp() + "/memory-bound.sqlite3"
"""
    + STREAMED_REQUEST
    + """
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from importlib import import_module
from django.conf import settings
SessionStore = import_module(settings.SESSION_ENGINE).SessionStore
from django.core.management import call_command
call_command("migrate", verbosity=0)
person = get_user_model().objects.create_user("memory", password="memory-bound-password")
person.groups.add(Group.objects.get(name="viewer"))
session = SessionStore()
session.update({"_auth_user_id": str(person.pk), "_auth_user_hash": person.get_session_auth_hash(),
                "_auth_user_backend": settings.AUTHENTICATION_BACKENDS[0]})
session.save()
CSRF = "m" * 32
SIGNED = {"HTTP_COOKIE": f"{settings.SESSION_COOKIE_NAME}={session.session_key}; csrftoken={CSRF}",
          "HTTP_X_CSRFTOKEN": CSRF, "HTTP_REFERER": "http://localhost/signals/"}
"""
)


def test_an_upload_of_ten_times_the_limit_streams_past_without_being_held() -> None:
    limit = settings.MAX_UPLOAD_BYTES
    baseline = child(SIGNED_IN + "RESULT = {}\n")
    boundary = "memorybound"
    head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="upload"; filename="big.log"'
        "\r\nContent-Type: text/plain\r\n\r\n"
    )
    hostile = child(
        SIGNED_IN
        + f"""
status, body = call(
    "/signals/", "multipart/form-data; boundary={boundary}",
    {head.encode()!r}, b"W1203 worker: step 1 of many, all is well\\n" * 4096, {10 * limit},
    b"\\r\\n--{boundary}--\\r\\n", SIGNED,
)
RESULT = {{"status": status, "refused": b"The file is larger than" in body}}
"""
    )
    assert hostile["status"][:3] in {"200", "400"} and hostile["refused"], hostile
    assert float(hostile["peak_mb"]) - float(baseline["peak_mb"]) < limit / MB, (
        baseline,
        hostile,
    )
