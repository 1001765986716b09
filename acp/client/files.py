"""Ready-made ``fs/read_text_file`` and ``fs/write_text_file`` handlers confined to local roots.

:class:`LocalFiles` answers the agent's file-system requests from the local disk, but only for
absolute paths that stay inside a fixed set of allowed root folders::

    files = LocalFiles(["/home/me/project"])
    builder.read_text_file_handler(files.read_text_file)
    builder.write_text_file_handler(files.write_text_file)

What it guarantees (and how):

* **Absolute paths only.** A relative path is refused with -32602 (the spec requires absolute
  paths; guessing a base folder would be a silent security decision).
* **No ``..`` or symlink escape.** The real path of the target (every symlink in every component
  resolved, ``..`` applied after resolution, as the kernel does) must lie inside the real path of
  a root. A symlink inside a root that points inside a root is fine; one pointing outside is
  refused, for reads and for writes (a symlinked parent folder included), before anything about
  the outside target (even whether it exists) is revealed.
* **No race between the check and the use.** The checked real path is then opened component by
  component from the root's directory descriptor with ``O_NOFOLLOW``, so a folder swapped for a
  symlink after the check makes the request fail instead of escaping (on platforms with
  ``dir_fd`` support: Linux, macOS, BSDs).
* **No hard-link escape.** A regular file with more than one name (``st_nlink > 1``) may have its
  other names outside the roots; reads and writes of such files are refused unless
  ``allow_hard_links=True``. (An atomic write would not change the other names anyway, since it
  replaces the inode; it is refused too so that both directions behave the same.)
* **Only regular files.** Directories, FIFOs, devices and sockets are refused (a FIFO is opened
  non-blocking so that the check itself cannot hang).
* **A read size limit** (``max_read_bytes``, default 10 MiB): a whole-file read of a larger file is
  refused with -32602 (an error, never silently truncated content). With ``line``/``limit`` the
  file is streamed, so a window of a huge file can be read as long as the *returned* part fits.
* **``line`` / ``limit``** follow the spec: ``line`` is 1-based (``0`` is read as ``1``, since the
  schema allows it), ``limit`` is the maximum number of lines. Lines end at ``\\n`` only, and the
  returned text keeps line endings exactly as on disk (so CRLF files round-trip). A ``line`` past
  the end of the file, or ``limit=0``, gives ``""``.
* **Decoding** is strict UTF-8 by default: a file that is not valid UTF-8 is refused with -32602
  rather than handed over with replacement characters, because an agent that edits such text and
  writes it back would silently destroy the original bytes. Pass ``decode_errors="replace"`` for
  lossy decoding (U+FFFD) instead.
* **Atomic writes**: the text goes to a temporary file in the target's folder, is fsynced, then
  ``os.replace``\\ d over the target (and the folder fsynced), so a crash leaves either the old or
  the new file, never half of one; on failure the temporary file is removed. An existing file's
  permission bits are kept; a new file gets the default ``0o666 & ~umask``. Missing parent
  folders (inside the roots) are created.
* **Errors**: a missing file is -32002 with ``data={"uri": "file:///..."}``; every refusal
  (outside the roots, relative, not a regular file, too large, not UTF-8, hard link, permission
  denied) is -32602 with a message that names the problem. Other OS errors propagate and are
  answered as -32603 by the connection, with no details sent.
"""

from __future__ import annotations

import errno
import logging
import os
import secrets
import stat
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path, PurePath
from typing import Any, Literal

from ..errors import INVALID_REQUEST, RequestError
from ..schema import (
    ReadTextFileRequest,
    ReadTextFileResponse,
    WriteTextFileRequest,
    WriteTextFileResponse,
)

__all__ = ["LocalFiles", "DEFAULT_MAX_READ_BYTES"]

logger = logging.getLogger("acp.client.files")

DEFAULT_MAX_READ_BYTES = 10 * 1024 * 1024
"""Default largest number of bytes :meth:`LocalFiles.read_text_file` returns: 10 MiB."""

_CHUNK = 64 * 1024
_HAVE_DIR_FD = os.open in os.supports_dir_fd and os.mkdir in os.supports_dir_fd
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_O_BINARY = getattr(os, "O_BINARY", 0)


def _file_uri(path: str) -> str:
    try:
        return Path(path).as_uri()
    except ValueError:
        return path


def _is_cancelled(ctx: Any) -> bool:
    event = getattr(ctx, "cancelled", None)
    return bool(event is not None and event.is_set())


class LocalFiles:
    """``fs/read_text_file`` and ``fs/write_text_file`` handlers confined to ``roots``.

    Args:
        roots: the folders the agent may read and write in (absolute or relative to the current
            directory; resolved to their real paths once, here). At least one is required.
        max_read_bytes: the most bytes a read may return; a larger whole-file read is refused.
        allow_write: when false, :meth:`write_text_file` refuses every write (-32600); do not
            register it as a handler then, so the client does not advertise the capability.
        allow_hard_links: allow reading and writing regular files that have more than one name.
        decode_errors: ``"strict"`` (default: refuse non-UTF-8 files) or ``"replace"``.

    See the module documentation for the exact rules.
    """

    def __init__(
        self,
        roots: Sequence[str | Path],
        *,
        max_read_bytes: int = DEFAULT_MAX_READ_BYTES,
        allow_write: bool = True,
        allow_hard_links: bool = False,
        decode_errors: Literal["strict", "replace"] = "strict",
    ) -> None:
        if isinstance(roots, (str, PurePath)):
            raise TypeError("roots must be a sequence of paths, not a single path")
        if not roots:
            raise ValueError("LocalFiles needs at least one root folder")
        if max_read_bytes < 0:
            raise ValueError("max_read_bytes must be >= 0")
        if decode_errors not in ("strict", "replace"):
            raise ValueError("decode_errors must be 'strict' or 'replace'")
        resolved: list[str] = []
        for root in roots:
            real = os.path.realpath(os.path.abspath(os.fspath(root)))
            if real not in resolved:
                resolved.append(real)
        self._roots: tuple[str, ...] = tuple(resolved)
        self._max_read_bytes = max_read_bytes
        self._allow_write = allow_write
        self._allow_hard_links = allow_hard_links
        self._decode_errors = decode_errors

    # ---- public properties ----

    @property
    def roots(self) -> tuple[str, ...]:
        """The allowed root folders, as resolved real paths."""
        return self._roots

    @property
    def max_read_bytes(self) -> int:
        """The most bytes a read may return."""
        return self._max_read_bytes

    @property
    def allow_write(self) -> bool:
        """Whether :meth:`write_text_file` may write at all."""
        return self._allow_write

    def __repr__(self) -> str:
        return (
            f"LocalFiles(roots={list(self._roots)!r}, max_read_bytes={self._max_read_bytes}, "
            f"allow_write={self._allow_write})"
        )

    # ---- handlers ----

    def read_text_file(self, request: ReadTextFileRequest, ctx: Any) -> ReadTextFileResponse:
        """Handle ``fs/read_text_file``: the file's text, or the ``line``/``limit`` window of it."""
        if _is_cancelled(ctx):
            raise RequestError.request_cancelled()
        line = request.line
        limit = request.limit
        if line is not None and line < 0:
            raise RequestError.invalid_params("line must be a positive 1-based line number")
        if limit is not None and limit < 0:
            raise RequestError.invalid_params("limit must be >= 0")
        logger.debug("read %s (line=%s, limit=%s)", request.path, line, limit)
        root, real = self._confine(request.path)
        with self._open_confined(root, real, request.path, write=False) as fd:
            st = os.fstat(fd)
            self._check_regular(st, request.path)
            if line is None and limit is None:
                data = self._read_whole(fd, st.st_size, request.path)
            else:
                data = self._read_window(fd, max(line or 1, 1), limit, request.path)
        try:
            text = data.decode("utf-8", errors=self._decode_errors)
        except UnicodeDecodeError as exc:
            raise RequestError.invalid_params(
                f"{request.path} is not valid UTF-8 text (byte {exc.start})"
            ) from None
        logger.debug("read %s: %d bytes", request.path, len(data))
        return ReadTextFileResponse(content=text)

    def write_text_file(self, request: WriteTextFileRequest, ctx: Any) -> WriteTextFileResponse:
        """Handle ``fs/write_text_file``: replace (or create) the file atomically."""
        if not self._allow_write:
            raise RequestError(INVALID_REQUEST, "writing files is not allowed by this client")
        if _is_cancelled(ctx):
            raise RequestError.request_cancelled()
        try:
            data = request.content.encode("utf-8")
        except UnicodeEncodeError:
            raise RequestError.invalid_params("content cannot be encoded as UTF-8") from None
        logger.debug("write %s: %d bytes", request.path, len(data))
        root, real = self._confine(request.path)
        if real == root:
            raise RequestError.invalid_params(f"{request.path} is a directory")
        parent_real, name = os.path.split(real)
        with self._open_confined(root, parent_real, request.path, write=True) as dir_fd:
            self._atomic_write(dir_fd, parent_real, name, data, request.path)
        return WriteTextFileResponse()

    # ---- confinement ----

    def _confine(self, path: str) -> tuple[str, str]:
        """(root, real path) for an allowed ``path``; raises -32602 otherwise."""
        if not isinstance(path, str) or not path:
            raise RequestError.invalid_params("path must be a non-empty absolute path")
        if "\0" in path:
            raise RequestError.invalid_params("path contains a NUL character")
        if not os.path.isabs(path):
            raise RequestError.invalid_params(f"path must be absolute: {path!r}")
        real = os.path.realpath(path)
        for root in self._roots:
            if _is_within(real, root):
                return root, real
        logger.debug("refused %s: resolves to %s, outside the allowed roots", path, real)
        raise RequestError.invalid_params(f"{path} is outside the allowed roots")

    @contextmanager
    def _open_confined(self, root: str, real: str, shown: str, *, write: bool) -> Iterator[int]:
        """Open ``real`` (the target file for reads, its parent folder for writes) without
        following any symlink, walking down from ``root``; yields the descriptor."""
        rel = os.path.relpath(real, root)
        parts = [] if rel == os.curdir else rel.split(os.sep)
        if not _HAVE_DIR_FD:  # pragma: no cover - Windows and exotic platforms
            yield from self._open_by_path(real, shown, write=write)
            return
        if not write and not parts:
            raise RequestError.invalid_params(f"{shown} is a directory")
        dir_flags = os.O_RDONLY | _O_DIRECTORY | _O_NOFOLLOW
        try:
            fd = os.open(root, os.O_RDONLY | _O_DIRECTORY)
        except FileNotFoundError:
            raise RequestError.resource_not_found(_file_uri(shown)) from None
        try:
            folders = parts if write else parts[:-1]
            for part in folders:
                try:
                    next_fd = os.open(part, dir_flags, dir_fd=fd)
                except FileNotFoundError:
                    if not write:
                        raise
                    try:
                        os.mkdir(part, 0o777, dir_fd=fd)
                    except FileExistsError:
                        pass
                    next_fd = os.open(part, dir_flags, dir_fd=fd)
                os.close(fd)
                fd = next_fd
            if not write:
                next_fd = os.open(
                    parts[-1], os.O_RDONLY | _O_NOFOLLOW | _O_NONBLOCK | _O_BINARY, dir_fd=fd
                )
                os.close(fd)
                fd = next_fd
        except FileNotFoundError:
            os.close(fd)
            raise RequestError.resource_not_found(_file_uri(shown)) from None
        except OSError as exc:
            os.close(fd)
            if exc.errno in _REFUSAL_ERRNOS:
                raise _os_refusal(exc, shown) from None
            raise
        try:
            yield fd
        finally:
            os.close(fd)

    def _open_by_path(
        self, real: str, shown: str, *, write: bool
    ) -> Iterator[int]:  # pragma: no cover - platforms without dir_fd
        try:
            if write:
                os.makedirs(real, exist_ok=True)
                fd = os.open(real, os.O_RDONLY)
            else:
                fd = os.open(real, os.O_RDONLY | _O_NOFOLLOW | _O_NONBLOCK | _O_BINARY)
        except FileNotFoundError:
            raise RequestError.resource_not_found(_file_uri(shown)) from None
        except OSError as exc:
            raise _os_refusal(exc, shown) from None
        try:
            yield fd
        finally:
            os.close(fd)

    def _check_regular(self, st: os.stat_result, shown: str) -> None:
        if stat.S_ISDIR(st.st_mode):
            raise RequestError.invalid_params(f"{shown} is a directory")
        if not stat.S_ISREG(st.st_mode):
            raise RequestError.invalid_params(f"{shown} is not a regular file")
        if st.st_nlink > 1 and not self._allow_hard_links:
            logger.debug("refused %s: %d hard links", shown, st.st_nlink)
            raise RequestError.invalid_params(
                f"{shown} has {st.st_nlink} hard links; files with several names are refused"
            )

    # ---- reading ----

    def _too_large(self, shown: str) -> RequestError:
        return RequestError.invalid_params(
            f"{shown} is larger than the read limit of {self._max_read_bytes} bytes; "
            "read it in parts with line/limit"
        )

    def _read_whole(self, fd: int, size: int, shown: str) -> bytes:
        if size > self._max_read_bytes:
            raise self._too_large(shown)
        chunks: list[bytes] = []
        total = 0
        while True:
            # The file may grow while it is read: never take more than the limit + 1 byte.
            chunk = os.read(fd, min(_CHUNK, self._max_read_bytes + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > self._max_read_bytes:
                raise self._too_large(shown)
        return b"".join(chunks)

    def _read_window(self, fd: int, first: int, limit: int | None, shown: str) -> bytes:
        """Lines ``first`` .. ``first + limit - 1`` (1-based), streamed: memory stays bounded by
        the returned part, which must fit ``max_read_bytes``."""
        if limit == 0:
            return b""
        out = bytearray()
        line_no = 1
        taken = 0
        with os.fdopen(os.dup(fd), "rb", buffering=_CHUNK) as f:
            while True:
                piece = f.readline(_CHUNK)
                if not piece:
                    break
                if line_no >= first:
                    out += piece
                    if len(out) > self._max_read_bytes:
                        raise self._too_large(shown)
                if piece.endswith(b"\n"):
                    if line_no >= first:
                        taken += 1
                        if limit is not None and taken >= limit:
                            break
                    line_no += 1
        return bytes(out)

    # ---- writing ----

    def _atomic_write(self, dir_fd: int, parent: str, name: str, data: bytes, shown: str) -> None:
        use_dir_fd = _HAVE_DIR_FD
        kw: dict[str, Any] = {"dir_fd": dir_fd} if use_dir_fd else {}
        target: str = name if use_dir_fd else os.path.join(parent, name)
        try:
            st: os.stat_result | None = os.stat(target, follow_symlinks=False, **kw)
        except FileNotFoundError:
            st = None
        except OSError as exc:
            if exc.errno in _REFUSAL_ERRNOS:
                raise _os_refusal(exc, shown) from None
            raise
        if st is not None:
            if stat.S_ISLNK(st.st_mode):  # swapped in after the check
                raise RequestError.invalid_params(f"{shown} changed while it was being written")
            self._check_regular(st, shown)
        tmp_name = f".{name}.acp-{secrets.token_hex(6)}.tmp"
        tmp: str = tmp_name if use_dir_fd else os.path.join(parent, tmp_name)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW | _O_BINARY
        try:
            fd = os.open(tmp, flags, 0o600 if st is not None else 0o666, **kw)
        except OSError as exc:
            if exc.errno in _REFUSAL_ERRNOS:
                raise _os_refusal(exc, shown) from None
            raise
        try:
            try:
                if st is not None and hasattr(os, "fchmod"):
                    os.fchmod(fd, stat.S_IMODE(st.st_mode))
                view = memoryview(data)
                while view:
                    written = os.write(fd, view)
                    view = view[written:]
                os.fsync(fd)
            finally:
                os.close(fd)
            if use_dir_fd:
                os.replace(tmp, target, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            else:  # pragma: no cover
                os.replace(tmp, target)
        except BaseException as exc:
            try:
                os.unlink(tmp, **kw)
            except OSError:
                pass
            if isinstance(exc, OSError) and exc.errno in _REFUSAL_ERRNOS:
                raise _os_refusal(exc, shown) from None
            raise
        try:
            os.fsync(dir_fd)
        except OSError:  # pragma: no cover - some file systems cannot fsync folders
            pass
        logger.debug("wrote %s (%d bytes)", shown, len(data))


_REFUSAL_ERRNOS = {
    errno.EACCES,
    errno.EPERM,
    errno.ELOOP,
    errno.ENOTDIR,
    errno.EISDIR,
    errno.EROFS,
    errno.ENOSPC,
    errno.ENAMETOOLONG,
    errno.EEXIST,
}


def _os_refusal(exc: OSError, shown: str) -> RequestError:
    if exc.errno in (errno.EACCES, errno.EPERM):
        return RequestError.invalid_params(f"permission denied: {shown}")
    if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EEXIST):
        # ELOOP: a component became a symlink after the check (O_NOFOLLOW); ENOTDIR: a
        # folder in the path is a file; EEXIST: a mkdir raced with something that is no folder.
        return RequestError.invalid_params(f"{shown}: a component of the path is not a folder")
    if exc.errno == errno.EISDIR:
        return RequestError.invalid_params(f"{shown} is a directory")
    if exc.errno == errno.EROFS:
        return RequestError.invalid_params(f"{shown} is on a read-only file system")
    if exc.errno == errno.ENOSPC:
        return RequestError.invalid_params(f"no space left to write {shown}")
    if exc.errno == errno.ENAMETOOLONG:
        return RequestError.invalid_params(f"path too long: {shown}")
    return RequestError.invalid_params(f"cannot access {shown}")


def _is_within(path: str, root: str) -> bool:
    if path == root:
        return True
    prefix = root if root.endswith(os.sep) else root + os.sep
    return path.startswith(prefix)
