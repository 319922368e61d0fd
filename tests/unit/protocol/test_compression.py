"""Codecs: Kafka's framings, bounded decompression and error mapping."""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable

import cramjam
import pytest
from aiokafka import codec as aiokafka_codec
from hypothesis import given, settings
from hypothesis import strategies as st

from tiercel.protocol.compression import (
    DEFAULT_MAX_DECOMPRESSED_SIZE,
    CompressionType,
    compress,
    decompress,
    decompress_into,
)
from tiercel.protocol.errors import CorruptRecordError, RecordTooLargeError, UnknownServerError

CODECS = [c for c in CompressionType if c != CompressionType.NONE]
XERIAL_HEADER = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
PAYLOAD = b"".join(b"record %d of a compressible batch; " % i for i in range(3000))


_SCRATCH = bytearray()


def into_scratch(codec: int, data: bytes, max_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE) -> bytes:
    """`decompress_into` through one scratch buffer every test shares, reused as the
    reader reuses it."""
    with decompress_into(codec, data, _SCRATCH, max_size) as view:
        return bytes(view)


# The checks below hold for both entry points.
DECODERS = pytest.mark.parametrize(
    "decode", [decompress, into_scratch], ids=["decompress", "decompress_into"]
)


def xerial(*chunks: bytes) -> bytes:
    return XERIAL_HEADER + b"".join(
        struct.pack(">i", len(c)) + c
        for c in (bytes(cramjam.snappy.compress_raw(x)) for x in chunks)
    )


def test_names_and_ids_are_kafkas() -> None:
    assert [(c.value, c.kafka_name) for c in CompressionType] == [
        (0, "none"),
        (1, "gzip"),
        (2, "snappy"),
        (3, "lz4"),
        (4, "zstd"),
    ]
    assert CompressionType.from_name("zstd") is CompressionType.ZSTD
    with pytest.raises(ValueError, match="Unknown compression name"):
        CompressionType.from_name("ZSTD")
    assert CompressionType.for_id(2) is CompressionType.SNAPPY


@pytest.mark.parametrize("codec_id", [5, 6, 7])
def test_undefined_codec_ids_are_unknown_server_errors(codec_id: int) -> None:
    for call in (
        lambda: CompressionType.for_id(codec_id),
        lambda: decompress(codec_id, b"x"),
        lambda: compress(codec_id, b"x"),
    ):
        with pytest.raises(UnknownServerError, match=f"Unknown compression type id: {codec_id}"):
            call()


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(list(CompressionType)), st.binary(max_size=70_000))
def test_round_trip(codec: CompressionType, data: bytes) -> None:
    compressed = compress(codec, data)
    assert bytes(decompress(codec, compressed)) == data
    assert bytes(decompress(codec, memoryview(b"\x00" + compressed)[1:])) == data
    assert into_scratch(codec, compressed) == data


@pytest.mark.parametrize(
    "codec", [CompressionType.GZIP, CompressionType.SNAPPY, CompressionType.ZSTD]
)
@DECODERS
def test_limit_is_exact_where_the_codec_knows_sizes(
    decode: Callable[..., bytes | bytearray], codec: CompressionType
) -> None:
    # zstd: our frames declare their content size
    compressed = compress(codec, PAYLOAD)
    assert bytes(decode(codec, compressed, len(PAYLOAD))) == PAYLOAD
    with pytest.raises(RecordTooLargeError, match=codec.kafka_name):
        decode(codec, compressed, len(PAYLOAD) - 1)


@pytest.mark.parametrize("codec", CODECS)
@DECODERS
def test_bombs_are_refused(
    decode: Callable[..., bytes | bytearray], codec: CompressionType
) -> None:
    bomb = compress(codec, bytes(10 * 1024 * 1024))
    assert len(bomb) < 1024 * 1024
    with pytest.raises(RecordTooLargeError):
        decode(codec, bomb, 1024 * 1024)


@pytest.mark.parametrize("codec", CODECS)
@DECODERS
def test_garbage_and_truncation_are_corrupt(
    decode: Callable[..., bytes | bytearray], codec: CompressionType
) -> None:
    compressed = compress(codec, PAYLOAD)
    for bad in (b"\x00" * 40, compressed[: len(compressed) // 2], b"\xff"):
        with pytest.raises(CorruptRecordError, match=codec.kafka_name):
            decode(codec, bad)
    with pytest.raises(CorruptRecordError, match="empty"):
        decode(codec, b"")


def test_none_passes_data_through() -> None:
    assert decompress(CompressionType.NONE, b"abc") == b"abc"
    data = bytearray(b"abc")
    with decompress_into(CompressionType.NONE, data, bytearray()) as view:
        assert view.obj is data, "a view of the data, not a copy"
    assert decompress(CompressionType.NONE, memoryview(b"abc")) == b"abc"
    assert compress(CompressionType.NONE, bytearray(b"abc")) == b"abc"


# --- gzip -------------------------------------------------------------------------------


def test_gzip_reads_concatenated_members_and_ignores_trailing_garbage() -> None:
    two = zlib.compress(b"first ", wbits=31) + zlib.compress(b"second", wbits=31)
    assert decompress(CompressionType.GZIP, two + b"garbage") == b"first second"
    with pytest.raises(RecordTooLargeError):
        decompress(CompressionType.GZIP, two, 11)


def test_gzip_output_is_standard() -> None:
    assert zlib.decompress(compress(CompressionType.GZIP, PAYLOAD), wbits=31) == PAYLOAD
    assert aiokafka_codec.gzip_decode(compress(CompressionType.GZIP, PAYLOAD)) == PAYLOAD
    assert decompress(CompressionType.GZIP, aiokafka_codec.gzip_encode(PAYLOAD)) == PAYLOAD


# --- snappy -----------------------------------------------------------------------------


def test_snappy_writes_xerial_framing_in_32k_chunks() -> None:
    data = bytes(range(256)) * 300  # 76800 bytes: chunks of 32768, 32768, 11264
    out = compress(CompressionType.SNAPPY, data)
    assert out[:16] == XERIAL_HEADER
    pos, sizes = 16, []
    while pos < len(out):
        (n,) = struct.unpack_from(">i", out, pos)
        sizes.append(len(bytes(cramjam.snappy.decompress_raw(out[pos + 4 : pos + 4 + n]))))
        pos += 4 + n
    assert sizes == [32768, 32768, 11264]
    assert aiokafka_codec.snappy_decode(out) == data


def test_snappy_reads_raw_blocks() -> None:
    raw = bytes(cramjam.snappy.compress_raw(PAYLOAD))
    assert decompress(CompressionType.SNAPPY, raw) == PAYLOAD
    with pytest.raises(RecordTooLargeError):
        decompress(CompressionType.SNAPPY, raw, len(PAYLOAD) - 1)


def test_snappy_reads_what_other_clients_write() -> None:
    assert decompress(CompressionType.SNAPPY, aiokafka_codec.snappy_encode(PAYLOAD)) == PAYLOAD


def test_xerial_stream_rules() -> None:
    codec = CompressionType.SNAPPY
    assert decompress(codec, xerial(b"ab", b"cd")) == b"abcd"
    # a second stream's header in place of a chunk length continues the stream
    assert decompress(codec, xerial(b"ab") + xerial(b"cd")) == b"abcd"
    # fewer than 4 trailing bytes end the stream; a header alone is an empty stream
    assert decompress(codec, xerial(b"ab") + b"\x00\x01") == b"ab"
    assert decompress(codec, XERIAL_HEADER) == b""
    # a magic-like chunk length followed by a different header ends the stream
    assert decompress(codec, xerial(b"ab") + b"\x82SNAPxxx" + b"\x00" * 8) == b"ab"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\x82SNAPPY\x00" + struct.pack(">ii", 0, 1), "version 0"),
        (XERIAL_HEADER + struct.pack(">i", -5), "invalid chunk size"),
        (XERIAL_HEADER + struct.pack(">i", 10) + b"abc", "truncated"),
        (XERIAL_HEADER + b"\x82SNAPPY\x00\x00", "concatenated"),
        (xerial(b"ab") + b"\x82SNAPPY\x00" + struct.pack(">ii", 0, 1), "version 0"),
        (XERIAL_HEADER + struct.pack(">i", 3) + b"\x05ab", "snappy"),
    ],
)
def test_xerial_corruption(data: bytes, message: str) -> None:
    with pytest.raises(CorruptRecordError, match=message):
        decompress(CompressionType.SNAPPY, data)


# --- lz4 --------------------------------------------------------------------------------


def xxh32(data: bytes, seed: int = 0) -> int:
    """xxHash32, for the checksums of hand-made LZ4 frames."""
    p1, p2, p3, p4, p5 = 0x9E3779B1, 0x85EBCA77, 0xC2B2AE3D, 0x27D4EB2F, 0x165667B1
    mask = 0xFFFFFFFF

    def rotl(x: int, r: int) -> int:
        return ((x << r) | (x >> (32 - r))) & mask

    n, p = len(data), 0
    if n >= 16:
        v = [(seed + p1 + p2) & mask, (seed + p2) & mask, seed, (seed - p1) & mask]
        while p + 16 <= n:
            for i in range(4):
                (word,) = struct.unpack_from("<I", data, p)
                v[i] = rotl((v[i] + word * p2) & mask, 13) * p1 & mask
                p += 4
        h = (rotl(v[0], 1) + rotl(v[1], 7) + rotl(v[2], 12) + rotl(v[3], 18)) & mask
    else:
        h = (seed + p5) & mask
    h = (h + n) & mask
    while p + 4 <= n:
        (word,) = struct.unpack_from("<I", data, p)
        h = rotl((h + word * p3) & mask, 17) * p4 & mask
        p += 4
    while p < n:
        h = rotl((h + data[p] * p5) & mask, 11) * p1 & mask
        p += 1
    h = ((h ^ (h >> 15)) * p2) & mask
    h = ((h ^ (h >> 13)) * p3) & mask
    return h ^ (h >> 16)


def lz4_frame(
    flg: int, bd: int, *blocks: bytes, content: bytes = b"", end_mark: bool = True
) -> bytes:
    """An LZ4 frame around raw `blocks`, with sizes and checksums as FLG asks."""
    descriptor = bytes((flg, bd)) + (struct.pack("<Q", len(content)) if flg & 0x08 else b"")
    out = [struct.pack("<I", 0x184D2204), descriptor, bytes(((xxh32(descriptor) >> 8) & 0xFF,))]
    for block in blocks:
        out.append(block)
        if flg & 0x10:
            out.append(struct.pack("<I", xxh32(block[4:])))
    if end_mark:
        out.append(struct.pack("<I", 0))
        if flg & 0x04:
            out.append(struct.pack("<I", xxh32(content)))
    return b"".join(out)


def lz4_block(data: bytes, *, stored: bool = False) -> bytes:
    body = data if stored else bytes(cramjam.lz4.compress_block(data, store_size=False))
    return struct.pack("<I", len(body) | (0x80000000 if stored else 0)) + body


def test_xxh32_matches_the_header_checksums_cramjam_writes() -> None:
    for content_checksum, hc in ((False, 0xAD), (True, 0xBD)):
        c = cramjam.lz4.Compressor(block_linked=False, content_checksum=content_checksum)
        c.compress(b"x")
        frame = bytes(c.finish())
        assert frame[6] == hc == (xxh32(frame[4:6]) >> 8) & 0xFF


def test_lz4_output_is_what_kafka_reads() -> None:
    out = compress(CompressionType.LZ4, PAYLOAD)
    flg, bd = out[4], out[5]
    assert flg >> 6 == 1 and flg & 0x20 and not flg & 0x03  # v1, independent, no dict id
    assert bd == 0x40  # 64 KiB blocks
    assert bytes(cramjam.lz4.decompress(out)) == PAYLOAD
    assert aiokafka_codec.lz4_decode(out) == PAYLOAD


def test_lz4_frames_kafka_accepts() -> None:
    codec = CompressionType.LZ4
    stored = lz4_frame(0x60, 0x40, lz4_block(b"stored", stored=True))
    assert decompress(codec, stored) == b"stored"
    text = PAYLOAD[:60_000]
    with_size = lz4_frame(0x68, 0x40, lz4_block(text), content=text)
    assert decompress(codec, with_size) == text
    checksums = lz4_frame(
        0x74, 0x70, lz4_block(b"abc"), lz4_block(b"de", stored=True), content=b"abcde"
    )
    assert decompress(codec, checksums) == b"abcde"
    assert decompress(codec, lz4_frame(0x60, 0x40)) == b""
    # bytes after the end mark are ignored, as Kafka's Lz4BlockInputStream does
    assert decompress(codec, compress(codec, b"abc") + b"more") == b"abc"
    assert decompress(codec, checksums + b"x") == b"abcde"
    assert into_scratch(codec, checksums + b"x") == b"abcde"


@pytest.mark.parametrize(
    ("frame", "message"),
    [
        (bytes(cramjam.lz4.compress(PAYLOAD)), "frame flags"),  # linked blocks
        (lz4_frame(0x80 | 0x20, 0x40), "frame flags"),  # version 2
        (lz4_frame(0x61, 0x40), "frame flags"),  # dictionary id
        (lz4_frame(0x60, 0x30), "block descriptor"),  # 16 KiB blocks
        (lz4_frame(0x60, 0x41), "block descriptor"),
        (lz4_frame(0x60, 0x40, struct.pack("<I", 65537) + b"x"), "exceeded max"),
        (lz4_frame(0x60, 0x40, lz4_block(b"abc"), end_mark=False), "end mark"),
        (lz4_frame(0x60, 0x40, struct.pack("<I", 100) + b"x", end_mark=False), "truncated"),
        (lz4_frame(0x64, 0x40, lz4_block(b"abc"), content=b"abc")[:-2], "content checksum"),
        (lz4_frame(0x68, 0x40)[:10], "truncated frame header"),
        (b"\x04\x22\x4d\x19" + b"\x00" * 10, "not an LZ4 frame"),
        # checked by the decoder
        (lz4_frame(0x60, 0x40)[:6] + b"\x00" + struct.pack("<I", 0), "lz4: .*[Cc]hecksum"),
        (lz4_frame(0x70, 0x40, lz4_block(b"abc"))[:-5] + b"\x00" * 5, "lz4: .*[Cc]hecksum"),
        (lz4_frame(0x68, 0x40, lz4_block(b"abc"), content=b"abcd"), "lz4: "),
        (lz4_frame(0x60, 0x40, struct.pack("<I", 3) + b"\xff\xff\xff"), "lz4: "),
    ],
)
@DECODERS
def test_lz4_frames_rejected(
    decode: Callable[..., bytes | bytearray], frame: bytes, message: str
) -> None:
    with pytest.raises(CorruptRecordError, match=message):
        decode(CompressionType.LZ4, frame)


@DECODERS
def test_lz4_limit_uses_the_content_size_or_the_block_bound(
    decode: Callable[..., bytes | bytearray],
) -> None:
    codec = CompressionType.LZ4
    content = b"s" * 100 + b"c" * 100
    blocks = (lz4_block(b"s" * 100, stored=True), lz4_block(b"c" * 100))
    sized = lz4_frame(0x68, 0x40, *blocks, content=content)
    assert decode(codec, sized, 200) == content
    with pytest.raises(RecordTooLargeError):
        decode(codec, sized, 199)
    # without a content size, a compressed block may hold a whole 64 KiB block
    unsized = lz4_frame(0x60, 0x40, *blocks)
    assert decode(codec, unsized, 100 + 65536) == content
    with pytest.raises(RecordTooLargeError):
        decode(codec, unsized, 100 + 65535)


# --- zstd -------------------------------------------------------------------------------


@DECODERS
def test_zstd_frames_without_content_size_use_the_block_bound(
    decode: Callable[..., bytes | bytearray],
) -> None:
    streaming = cramjam.zstd.Compressor(level=3)
    streaming.compress(PAYLOAD)
    frame = bytes(streaming.finish())
    assert not frame[4] & 0xC0 and not frame[4] & 0x20  # no content size in the header
    assert decode(CompressionType.ZSTD, frame) == PAYLOAD
    # the bound is one 128 KiB block above the real size at most
    assert decode(CompressionType.ZSTD, frame, len(PAYLOAD) + 128 * 1024) == PAYLOAD
    with pytest.raises(RecordTooLargeError):
        decode(CompressionType.ZSTD, frame, len(PAYLOAD) - 1)


def test_zstd_reads_concatenated_and_skippable_frames() -> None:
    skippable = struct.pack("<II", 0x184D2A53, 3) + b"xyz"
    data = (
        compress(CompressionType.ZSTD, b"one ") + skippable + compress(CompressionType.ZSTD, b"two")
    )
    assert decompress(CompressionType.ZSTD, data) == b"one two"
    assert decompress(CompressionType.ZSTD, aiokafka_codec.zstd_encode(PAYLOAD)) == PAYLOAD


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\x28\xb5\x2f\xfd\x08" + b"\x00" * 8, "reserved"),
        (b"\x28\xb5\x2f\xfd\x00\x00" + b"\x07\x00\x00", "reserved block type"),
        (b"\x28\xb5\x2f\xfd\x00\x00" + b"\x01\x01\x00", "truncated"),
        (struct.pack("<II", 0x184D2A50, 50) + b"x", "truncated"),
        (b"\x12\x34\x56\x78" + b"\x00" * 8, "unknown frame magic"),
        (b"\x28\xb5\x2f\xfd\xc0" + b"\x00" * 4, "truncated frame header"),
    ],
)
@DECODERS
def test_zstd_corruption(
    decode: Callable[..., bytes | bytearray], data: bytes, message: str
) -> None:
    with pytest.raises(CorruptRecordError, match=message):
        decode(CompressionType.ZSTD, data)
