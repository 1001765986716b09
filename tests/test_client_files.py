"""LocalFiles: confinement to the roots (every escape attempt), limits, line/limit, atomic writes."""

from __future__ import annotations

import os
import stat
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from acp.client.files import LocalFiles
from acp.errors import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    REQUEST_CANCELLED,
    RESOURCE_NOT_FOUND,
    RequestError,
)
from acp.schema import ReadTextFileRequest, ReadTextFileResponse, WriteTextFileRequest

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX file semantics")

SID = "sess_1"


class Ctx:
    def __init__(self) -> None:
        self.session_id = SID
        self.cancelled = threading.Event()


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "root"
    r.mkdir()
    return r


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    o = tmp_path / "outside"
    o.mkdir()
    (o / "secret.txt").write_text("top secret\n")
    return o


@pytest.fixture
def files(root: Path) -> LocalFiles:
    return LocalFiles([root])


def read(
    files: LocalFiles, path: Path | str, line: int | None = None, limit: int | None = None
) -> str:
    response = files.read_text_file(
        ReadTextFileRequest(session_id=SID, path=str(path), line=line, limit=limit), Ctx()
    )
    assert isinstance(response, ReadTextFileResponse)
    return response.content


def write(files: LocalFiles, path: Path | str, content: str) -> None:
    files.write_text_file(
        WriteTextFileRequest(session_id=SID, path=str(path), content=content), Ctx()
    )


def refused(fn: Any, *args: Any, code: int = INVALID_PARAMS) -> RequestError:
    with pytest.raises(RequestError) as info:
        fn(*args)
    assert info.value.code == code, info.value
    return info.value


# ---- reading inside the roots ----


def test_read_whole_file(files: LocalFiles, root: Path) -> None:
    (root / "a.txt").write_text("héllo\nworld\n", encoding="utf-8")
    assert read(files, root / "a.txt") == "héllo\nworld\n"


def test_read_in_nested_folder_and_second_root(tmp_path: Path, root: Path) -> None:
    other = tmp_path / "other"
    (other / "deep").mkdir(parents=True)
    (other / "deep" / "x.txt").write_text("x")
    (root / "sub").mkdir()
    (root / "sub" / "y.txt").write_text("y")
    files = LocalFiles([root, other])
    assert read(files, other / "deep" / "x.txt") == "x"
    assert read(files, root / "sub" / "y.txt") == "y"


def test_roots_are_resolved(tmp_path: Path, root: Path) -> None:
    link = tmp_path / "root-link"
    link.symlink_to(root, target_is_directory=True)
    (root / "f.txt").write_text("via link")
    files = LocalFiles([link])
    assert files.roots == (os.path.realpath(root),)
    assert read(files, link / "f.txt") == "via link"
    assert read(files, root / "f.txt") == "via link"


def test_missing_file_is_resource_not_found_with_uri(files: LocalFiles, root: Path) -> None:
    err = refused(read, files, root / "nope.txt", code=RESOURCE_NOT_FOUND)
    assert err.data == {"uri": (root / "nope.txt").as_uri()}


def test_missing_folder_is_resource_not_found(files: LocalFiles, root: Path) -> None:
    refused(read, files, root / "no" / "such" / "file.txt", code=RESOURCE_NOT_FOUND)


def test_directory_is_refused(files: LocalFiles, root: Path) -> None:
    (root / "d").mkdir()
    assert "directory" in refused(read, files, root / "d").message
    assert "directory" in refused(read, files, root).message


def test_fifo_is_refused_without_hanging(files: LocalFiles, root: Path) -> None:
    os.mkfifo(root / "fifo")
    assert "regular file" in refused(read, files, root / "fifo").message


# ---- escape attempts ----


def test_relative_path_refused(
    files: LocalFiles, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (root / "a.txt").write_text("a")
    monkeypatch.chdir(root)
    assert "absolute" in refused(read, files, "a.txt").message
    assert "absolute" in refused(write, files, "b.txt", "b").message
    assert not (root / "b.txt").exists()


def test_empty_and_nul_paths_refused(files: LocalFiles, root: Path) -> None:
    refused(read, files, "")
    refused(read, files, f"{root}/a\0b")


def test_dotdot_traversal_refused(files: LocalFiles, root: Path, outside: Path) -> None:
    sneaky = f"{root}/../outside/secret.txt"
    assert "outside the allowed roots" in refused(read, files, sneaky).message
    refused(write, files, f"{root}/../outside/new.txt", "x")
    assert not (outside / "new.txt").exists()


def test_dotdot_that_stays_inside_is_fine(files: LocalFiles, root: Path) -> None:
    (root / "sub").mkdir()
    (root / "a.txt").write_text("a")
    assert read(files, f"{root}/sub/../a.txt") == "a"


def test_sibling_prefix_is_not_inside(tmp_path: Path, root: Path) -> None:
    # "/x/root-evil" starts with "/x/root" as a string but is not inside it.
    evil = tmp_path / "root-evil"
    evil.mkdir()
    (evil / "f.txt").write_text("evil")
    files = LocalFiles([root])
    refused(read, files, evil / "f.txt")


def test_symlink_file_escape_refused(files: LocalFiles, root: Path, outside: Path) -> None:
    (root / "link.txt").symlink_to(outside / "secret.txt")
    refused(read, files, root / "link.txt")
    refused(write, files, root / "link.txt", "overwritten")
    assert (outside / "secret.txt").read_text() == "top secret\n"


def test_dangling_symlink_escape_refused_without_revealing(
    files: LocalFiles, root: Path, outside: Path
) -> None:
    (root / "dangling").symlink_to(outside / "does-not-exist.txt")
    # Refused as outside (-32602), not "not found" (-32002): nothing about the outside leaks.
    refused(read, files, root / "dangling")
    refused(write, files, root / "dangling", "x")
    assert not (outside / "does-not-exist.txt").exists()


def test_symlinked_parent_folder_escape_refused(
    files: LocalFiles, root: Path, outside: Path
) -> None:
    (root / "linkdir").symlink_to(outside, target_is_directory=True)
    refused(read, files, root / "linkdir" / "secret.txt")
    refused(write, files, root / "linkdir" / "planted.txt", "x")
    refused(write, files, root / "linkdir" / "new" / "deeper.txt", "x")
    assert sorted(os.listdir(outside)) == ["secret.txt"]


def test_symlink_inside_pointing_inside_is_fine(files: LocalFiles, root: Path) -> None:
    (root / "real").mkdir()
    (root / "real" / "f.txt").write_text("real")
    (root / "alias").symlink_to(root / "real", target_is_directory=True)
    (root / "flink.txt").symlink_to(root / "real" / "f.txt")
    assert read(files, root / "alias" / "f.txt") == "real"
    assert read(files, root / "flink.txt") == "real"
    write(files, root / "flink.txt", "changed")
    # The symlink stays a symlink; its target got the new text.
    assert (root / "flink.txt").is_symlink()
    assert (root / "real" / "f.txt").read_text() == "changed"


def test_hard_link_refused(files: LocalFiles, root: Path, outside: Path) -> None:
    os.link(outside / "secret.txt", root / "hard.txt")
    assert "hard links" in refused(read, files, root / "hard.txt").message
    refused(write, files, root / "hard.txt", "x")
    assert (outside / "secret.txt").read_text() == "top secret\n"


def test_hard_link_allowed_by_option(root: Path, outside: Path) -> None:
    os.link(outside / "secret.txt", root / "hard.txt")
    files = LocalFiles([root], allow_hard_links=True)
    assert read(files, root / "hard.txt") == "top secret\n"


def test_swapped_folder_after_check_is_not_followed(
    files: LocalFiles, root: Path, outside: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The race: the path is checked, then a folder is replaced by a symlink to the outside
    # before the file is opened. Simulated by swapping right after realpath() runs.
    (root / "d").mkdir()
    (root / "d" / "secret.txt").write_text("inside")
    real_realpath = os.path.realpath

    def swapping_realpath(p: Any, *a: Any, **kw: Any) -> str:
        result: str = real_realpath(p, *a, **kw)
        if str(p).endswith("secret.txt") and not (root / "d").is_symlink():
            os.rename(root / "d", root / "d-old")
            (root / "d").symlink_to(outside, target_is_directory=True)
        return result

    monkeypatch.setattr(os.path, "realpath", swapping_realpath)
    err = refused(read, files, root / "d" / "secret.txt")
    assert "top secret" not in str(err.data)


# ---- read limits, line / limit ----


def test_file_over_size_limit_refused(root: Path) -> None:
    files = LocalFiles([root], max_read_bytes=100)
    (root / "big.txt").write_text("x" * 101)
    (root / "ok.txt").write_text("x" * 100)
    assert "read limit" in refused(read, files, root / "big.txt").message
    assert read(files, root / "ok.txt") == "x" * 100


def test_window_of_big_file_is_readable(root: Path) -> None:
    files = LocalFiles([root], max_read_bytes=100)
    (root / "big.txt").write_text("".join(f"line {i}\n" for i in range(1, 1001)))
    assert read(files, root / "big.txt", line=500, limit=2) == "line 500\nline 501\n"
    # ...but the returned part must still fit the limit.
    refused(read, files, root / "big.txt", 1, 50)


def test_line_and_limit(files: LocalFiles, root: Path) -> None:
    (root / "f.txt").write_text("one\ntwo\nthree\nfour")
    p = root / "f.txt"
    assert read(files, p, line=1) == "one\ntwo\nthree\nfour"
    assert read(files, p, line=2) == "two\nthree\nfour"
    assert read(files, p, line=2, limit=2) == "two\nthree\n"
    assert read(files, p, limit=1) == "one\n"
    assert read(files, p, line=4) == "four"
    assert read(files, p, line=4, limit=10) == "four"
    assert read(files, p, line=0, limit=1) == "one\n"  # the schema allows 0: read as line 1


def test_line_beyond_eof_is_empty(files: LocalFiles, root: Path) -> None:
    (root / "f.txt").write_text("one\ntwo\n")
    assert read(files, root / "f.txt", line=3) == ""
    assert read(files, root / "f.txt", line=100, limit=5) == ""
    (root / "empty.txt").write_text("")
    assert read(files, root / "empty.txt", line=1, limit=1) == ""


def test_limit_zero_is_empty(files: LocalFiles, root: Path) -> None:
    (root / "f.txt").write_text("one\ntwo\n")
    assert read(files, root / "f.txt", limit=0) == ""
    assert read(files, root / "f.txt", line=2, limit=0) == ""


def test_negative_line_or_limit_refused(files: LocalFiles, root: Path) -> None:
    (root / "f.txt").write_text("one\n")
    refused(read, files, root / "f.txt", -1, None)
    refused(read, files, root / "f.txt", None, -1)


def test_crlf_lines_kept_verbatim(files: LocalFiles, root: Path) -> None:
    (root / "crlf.txt").write_bytes(b"a\r\nb\r\nc\r\n")
    assert read(files, root / "crlf.txt") == "a\r\nb\r\nc\r\n"
    assert read(files, root / "crlf.txt", line=2, limit=1) == "b\r\n"
    # A lone CR is not a line break (only LF is).
    (root / "cr.txt").write_bytes(b"a\rb\nc\n")
    assert read(files, root / "cr.txt", line=2) == "c\n"


def test_long_line_in_window_is_whole(files: LocalFiles, root: Path) -> None:
    long = "é" * 100_000  # longer than the internal chunk, multi-byte split across chunks
    (root / "long.txt").write_text(f"first\n{long}\nlast\n", encoding="utf-8")
    assert read(files, root / "long.txt", line=2, limit=1) == long + "\n"


def test_non_utf8_refused_by_default(files: LocalFiles, root: Path) -> None:
    (root / "latin1.txt").write_bytes("café\n".encode("latin-1"))
    assert "UTF-8" in refused(read, files, root / "latin1.txt").message


def test_non_utf8_replaced_when_asked(root: Path) -> None:
    (root / "latin1.txt").write_bytes("café\n".encode("latin-1"))
    files = LocalFiles([root], decode_errors="replace")
    assert read(files, root / "latin1.txt") == "caf\ufffd\n"


def test_cancelled_request(files: LocalFiles, root: Path) -> None:
    (root / "f.txt").write_text("x")
    ctx = Ctx()
    ctx.cancelled.set()
    with pytest.raises(RequestError) as info:
        files.read_text_file(ReadTextFileRequest(session_id=SID, path=str(root / "f.txt")), ctx)
    assert info.value.code == REQUEST_CANCELLED


# ---- writing ----


def test_write_creates_file_and_parents(files: LocalFiles, root: Path) -> None:
    write(files, root / "a" / "b" / "c.txt", "héllo\r\n")
    assert (root / "a" / "b" / "c.txt").read_bytes() == "héllo\r\n".encode()
    assert read(files, root / "a" / "b" / "c.txt") == "héllo\r\n"


def test_write_replaces_and_leaves_no_temp(files: LocalFiles, root: Path) -> None:
    (root / "f.txt").write_text("old")
    write(files, root / "f.txt", "new")
    assert (root / "f.txt").read_text() == "new"
    assert os.listdir(root) == ["f.txt"]


def test_write_new_file_follows_umask(files: LocalFiles, root: Path) -> None:
    old = os.umask(0o027)
    try:
        write(files, root / "new.txt", "x")
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(root / "new.txt").st_mode) == 0o640


def test_write_keeps_permission_bits(files: LocalFiles, root: Path) -> None:
    p = root / "script.sh"
    p.write_text("#!/bin/sh\n")
    os.chmod(p, 0o751)
    write(files, p, "#!/bin/sh\necho hi\n")
    assert stat.S_IMODE(os.stat(p).st_mode) == 0o751
    assert p.read_text() == "#!/bin/sh\necho hi\n"


def test_crash_during_write_keeps_original(
    files: LocalFiles, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = root / "f.txt"
    p.write_text("original")

    def crash(*args: Any, **kwargs: Any) -> None:
        raise OSError("simulated crash")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="simulated crash"):
        write(files, p, "new content")
    assert p.read_text() == "original"
    assert os.listdir(root) == ["f.txt"]  # the temporary file was removed


def test_crash_while_writing_data_keeps_original(
    files: LocalFiles, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = root / "f.txt"
    p.write_text("original")

    def failing_fsync(fd: int) -> None:
        raise OSError("disk on fire")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(OSError, match="disk on fire"):
        write(files, p, "new content")
    assert p.read_text() == "original"
    assert os.listdir(root) == ["f.txt"]


def test_write_onto_directory_refused(files: LocalFiles, root: Path) -> None:
    (root / "d").mkdir()
    refused(write, files, root / "d", "x")
    refused(write, files, root, "x")


def test_write_through_file_as_folder_refused(files: LocalFiles, root: Path) -> None:
    (root / "f.txt").write_text("x")
    refused(write, files, root / "f.txt" / "child.txt", "x")


def test_write_disabled(root: Path) -> None:
    files = LocalFiles([root], allow_write=False)
    refused(write, files, root / "f.txt", "x", code=INVALID_REQUEST)
    assert not (root / "f.txt").exists()


def test_write_unencodable_content_refused(files: LocalFiles, root: Path) -> None:
    refused(write, files, root / "f.txt", "bad \ud800 surrogate")
    assert not (root / "f.txt").exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores permission bits")
def test_permission_denied_is_invalid_params(files: LocalFiles, root: Path) -> None:
    p = root / "locked.txt"
    p.write_text("x")
    os.chmod(p, 0)
    try:
        assert "permission denied" in refused(read, files, p).message
    finally:
        os.chmod(p, 0o600)


def test_permission_error_is_invalid_params_simulated(
    files: LocalFiles, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Same as above, but also meaningful when the tests run as root.
    (root / "f.txt").write_text("x")
    real_open = os.open

    def denying_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if path == "f.txt":
            raise PermissionError(13, "Permission denied")
        fd: int = real_open(path, flags, *args, **kwargs)
        return fd

    monkeypatch.setattr(os, "open", denying_open)
    err = refused(read, files, root / "f.txt")
    assert err.message == f"permission denied: {root / 'f.txt'}"


def test_constructor_validation(root: Path) -> None:
    with pytest.raises(ValueError):
        LocalFiles([])
    with pytest.raises(TypeError):
        LocalFiles(str(root))
    with pytest.raises(ValueError):
        LocalFiles([root], max_read_bytes=-1)
