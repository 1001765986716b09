"""FdTransport over real pipes: a big message arrives whole, in every write mode."""

from __future__ import annotations

import hashlib
import os
import random
import threading

import pytest

from acp.transport.fd import FdTransport

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("blocking", [False, True], ids=["non-blocking", "blocking"])
def test_a_20_mib_write_arrives_whole_through_a_64_kib_pipe(blocking: bool) -> None:
    # The pipe takes 64 KiB at a time, so the write goes out in hundreds of partial writes;
    # each must continue exactly where the last one stopped (the slices of a memoryview).
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, blocking)
    writer = FdTransport(None, write_fd, description="writer")
    reader = FdTransport(read_fd, None, description="reader")
    data = random.Random(1).randbytes(20 << 20) + b"\n"  # a misplaced partial write changes the digest
    digest = hashlib.sha256()
    received = [0]

    def drain() -> None:
        while chunk := reader.read():
            digest.update(chunk)
            received[0] += len(chunk)

    thread = threading.Thread(target=drain)
    thread.start()
    writer.write(data)
    writer.close()
    thread.join(30)
    reader.close()
    assert not thread.is_alive()
    assert received[0] == len(data) and digest.digest() == hashlib.sha256(data).digest()
