"""`stoker doctor`: one line per thing stoker uses, what to fix, exit 1 when something is
missing (issue 18)."""
from __future__ import annotations

import json
import resource
import subprocess


def run_doctor(stoker_exe: str, nofile: int | None = None,
               *flags: str) -> subprocess.CompletedProcess:
    def limit() -> None:
        if nofile is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
    return subprocess.run([stoker_exe, "doctor", *flags], capture_output=True, text=True,
                          preexec_fn=limit, timeout=60)


def test_doctor_reports_every_check(stoker_exe):
    r = run_doctor(stoker_exe)
    names = [line.split()[1] for line in r.stdout.splitlines() if not line.startswith("      ")]
    assert names == ["fuse", "io_uring", "memfd", "open", "memory", "huge", "cuda"], r.stdout
    assert r.returncode == (1 if "FIX" in r.stdout else 0), r.stdout


def test_doctor_says_how_to_fix_a_low_open_file_limit(stoker_exe):
    r = run_doctor(stoker_exe, nofile=256)
    assert r.returncode == 1, r.stdout
    assert "FIX   open files  soft limit 256, hard limit 256" in r.stdout, r.stdout
    assert "raise the hard limit" in r.stdout, r.stdout


def test_doctor_json_is_one_document_a_script_can_gate_on(stoker_exe):
    r = run_doctor(stoker_exe, 256, "--json")
    assert r.returncode == 1, r.stdout
    report = json.loads(r.stdout)
    assert report["ok"] is False
    checks = {c["check"]: c for c in report["checks"]}
    assert list(checks) == ["fuse", "io_uring", "memfd", "open files", "memory", "huge pages",
                            "cuda"]
    assert {c["verdict"] for c in checks.values()} <= {"ok", "note", "fix"}
    assert checks["open files"]["verdict"] == "fix"
    assert checks["open files"]["detail"] == "soft limit 256, hard limit 256"
    assert "raise the hard limit" in checks["open files"]["fix"]
