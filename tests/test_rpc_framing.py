"""The line framer: any split of a byte stream gives the same lines; the cap holds."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from acp.rpc import LineFramer, LineTooLong


def frame_all(chunks: list[bytes], cap: int = 1 << 20) -> list[bytes | LineTooLong]:
    framer = LineFramer(cap)
    out: list[bytes | LineTooLong] = []
    for chunk in chunks:
        out.extend(framer.feed(chunk))
    out.extend(framer.end())
    return out


def split_at(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    chunks, last = [], 0
    for p in points:
        chunks.append(data[last:p])
        last = p
    chunks.append(data[last:])
    return chunks


line_bytes = st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"x").replace(b"\r", b"y"))


@settings(max_examples=300, deadline=None)
@given(st.lists(line_bytes, max_size=20), st.lists(st.integers(0, 10_000), max_size=30), st.booleans())
def test_any_split_gives_the_same_lines(lines: list[bytes], cuts: list[int], crlf: bool) -> None:
    sep = b"\r\n" if crlf else b"\n"
    data = sep.join(lines) + sep
    expected = [line for line in lines if line.strip()]
    assert frame_all([data]) == expected
    assert frame_all(split_at(data, cuts)) == expected


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 30), min_size=1, max_size=12), st.lists(st.integers(0, 500), max_size=20))
def test_over_long_lines_are_reported_in_place(sizes: list[int], cuts: list[int]) -> None:
    cap = 10
    lines = [b"a" * n for n in sizes]
    data = b"\n".join(lines) + b"\n"
    expected: list[bytes | LineTooLong] = [
        line if len(line) <= cap else LineTooLong(len(line)) for line in lines if line
    ]
    assert frame_all(split_at(data, cuts), cap) == expected


def test_crlf_blank_lines_and_last_line_without_newline() -> None:
    framer = LineFramer()
    assert framer.feed(b'{"a":1}\r\n\n   \r\n{"b":2}\n{"c"') == [b'{"a":1}', b'{"b":2}']
    assert framer.feed(b":3}") == []
    assert framer.end() == [b'{"c":3}']
    assert framer.end() == []


def test_an_over_long_line_is_never_held_whole() -> None:
    cap = 1024
    framer = LineFramer(cap)
    chunk = b"x" * 4096
    for _ in range(1000):  # 4 MB of one line
        assert framer.feed(chunk) == []
        assert framer.buffered <= cap
    assert framer.feed(b"yy\n{}\n") == [LineTooLong(4096 * 1000 + 2), b"{}"]
    assert framer.buffered == 0


def test_over_long_unterminated_line_at_end() -> None:
    framer = LineFramer(4)
    assert framer.feed(b"abcdefgh") == []
    assert framer.end() == [LineTooLong(8)]


def test_cap_must_be_positive() -> None:
    import pytest

    with pytest.raises(ValueError):
        LineFramer(0)
