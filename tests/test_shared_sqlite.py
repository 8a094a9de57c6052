"""connect_shared: processes that open one new SQLite file at the same moment all get it, set up once."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from searchrl.shared_sqlite import connect_shared
from tests.conftest import ROOT

FILES = 500

# Each child opens the same FILES new files in the same order, so the 4 race on the set-up of each one. With a
# plain sqlite3.connect and "PRAGMA journal_mode=WAL" in its place, 3 runs in 5 had a child fail with "database is
# locked" at 200 files (the failure CI met when 4 engines opened one web budget file).
CHILD = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from searchrl.shared_sqlite import connect_shared

    folder, files = Path(sys.argv[1]), int(sys.argv[2])
    while not (folder / "go").exists():
        time.sleep(0.0005)
    for i in range(files):
        db = connect_shared(folder / f"{i}.sqlite", "CREATE TABLE IF NOT EXISTS t (x INTEGER)")
        db.execute("INSERT INTO t VALUES (1)")
        db.close()
    """
)


def test_processes_opening_one_new_file_at_once_all_succeed(tmp_path: Path) -> None:
    children = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, str(tmp_path), str(FILES)], cwd=ROOT, stderr=subprocess.PIPE, text=True
        )
        for _ in range(4)
    ]
    try:
        time.sleep(1.0)
        (tmp_path / "go").touch()
        errors = [child.communicate(timeout=120)[1] for child in children]
    finally:
        for child in children:
            child.kill()
    assert all(child.returncode == 0 for child in children), [e[-400:] for e in errors if e]
    counts = {
        sqlite3.connect(tmp_path / f"{i}.sqlite").execute("SELECT COUNT(*) FROM t").fetchone()[0] for i in range(FILES)
    }
    assert counts == {4}


def test_the_file_is_in_wal_mode_and_the_setup_is_committed(tmp_path: Path) -> None:
    db = connect_shared(tmp_path / "a" / "x.sqlite", "CREATE TABLE t (x INTEGER)", isolation_level="DEFERRED")
    db.close()
    other = sqlite3.connect(tmp_path / "a" / "x.sqlite")
    assert other.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert other.execute("SELECT name FROM sqlite_master").fetchall() == [("t",)]
