"""Compression codecs of RecordBatch v2: the records section compressed as one blob.

Framings, as Kafka's clients write them (and as Kafka's broker accepts them):

    gzip    RFC 1952 members; concatenated members are read on, other trailing bytes
            ignored (java.util.zip.GZIPInputStream).
    snappy  xerial framing (Java client, librdkafka):
              magic  8 bytes  82 'S' 'N' 'A' 'P' 'P' 'Y' 00
              version int32, compatible version int32 (big-endian; version >= 1)
              then chunks: int32 length + raw snappy block; a chunk length equal to the
              magic's first 4 bytes starts a concatenated stream's header; fewer than 4
              trailing bytes end the stream.
            Anything without that header is one raw snappy block (older clients).
    lz4     one LZ4 frame (magic 04 22 4D 18, FLG, BD, [content size], HC, blocks of
            int32le size (high bit = stored uncompressed) + data [+ checksum], end mark
            0, [content checksum]); Kafka requires version 1, independent blocks, no
            dictionary id and 64 KiB-4 MiB blocks, and ignores bytes after the frame.
    zstd    zstd frames, skippable frames allowed.

Decompression is bounded: output above `max_size` raises RecordTooLargeError (Kafka's
MESSAGE_TOO_LARGE, on which the Java producer splits the batch and retries) before that
much memory is committed. Gzip and snappy enforce the limit exactly. For lz4 and zstd it
applies to the content size a frame header declares or, when the frame omits it (as
Kafka's Java client and streaming compressors do), to the frame's block-structure bound,
which counts every compressed block as a full block (64 KiB for Kafka's lz4, 128 KiB for
zstd): only a frame's last block is normally not full.

Corrupt input raises CorruptRecordError naming the codec. An undefined codec id (5-7)
raises UnknownServerError: Kafka's CompressionType.forId throws IllegalArgumentException
there, which its produce path reports as UNKNOWN_SERVER_ERROR.

The LZ4 and zstd decoders verify the frames' own checksums; Kafka's LZ4 reader skips the
content checksum, so a frame with only that wrong is CORRUPT_MESSAGE here and accepted
there (clients compute it correctly, so this matters for hand-made frames only).
"""

from __future__ import annotations

import struct
import zlib
from enum import IntEnum

import cramjam

from tiercel.protocol.errors import CorruptRecordError, RecordTooLargeError, UnknownServerError
from tiercel.protocol.record_batch import ReadableBuffer

__all__ = [
    "DEFAULT_MAX_DECOMPRESSED_SIZE",
    "CompressionType",
    "compress",
    "decompress",
    "decompress_into",
]

DEFAULT_MAX_DECOMPRESSED_SIZE = 64 * 1024 * 1024

# cramjam reports failures as DecompressionError, OSError or ValueError by codec.
_CODEC_ERRORS = (cramjam.DecompressionError, OSError, ValueError)

_INT32 = struct.Struct(">i")
_UINT32_LE = struct.Struct("<I")
_UINT64_LE = struct.Struct("<Q")


class CompressionType(IntEnum):
    """Codec ids of the attributes' low 3 bits, named as Kafka names them."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @property
    def kafka_name(self) -> str:
        """Kafka's name: "none", "gzip", "snappy", "lz4" or "zstd"."""
        return self.name.lower()

    @classmethod
    def from_name(cls, name: str) -> CompressionType:
        """Kafka's CompressionType.forName; raises ValueError for other names."""
        for codec in cls:
            if codec.kafka_name == name:
                return codec
        raise ValueError(f"Unknown compression name: {name}")

    @classmethod
    def for_id(cls, codec_id: int) -> CompressionType:
        """Kafka's CompressionType.forId; raises UnknownServerError for ids 5-7."""
        try:
            return cls(codec_id)
        except ValueError:
            raise UnknownServerError(f"Unknown compression type id: {codec_id}") from None


def compress(codec: int, data: ReadableBuffer) -> bytes:
    """Compress a records section the way Kafka's Java producer frames it.

    gzip at level 6, snappy in xerial framing with 32 KiB chunks, an LZ4 frame with
    independent 64 KiB blocks at level 9, zstd at level 3 (Kafka's default levels).
    Any thread.
    """
    codec = CompressionType.for_id(codec)
    if codec == CompressionType.NONE:
        return bytes(data)
    if codec == CompressionType.GZIP:
        return zlib.compress(data, 6, wbits=31)
    if codec == CompressionType.SNAPPY:
        return _xerial_compress(data)
    if codec == CompressionType.LZ4:
        # Kafka's Lz4BlockInputStream rejects linked blocks, cramjam's one-shot default.
        compressor = cramjam.lz4.Compressor(level=9, content_checksum=False, block_linked=False)
        compressor.compress(data if isinstance(data, bytes) else bytes(data))
        return bytes(compressor.finish())
    return bytes(cramjam.zstd.compress(data, level=3))


def decompress(
    codec: int, data: ReadableBuffer, max_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE
) -> bytes | bytearray:
    """Decompress a records section; see the module docstring for errors and limits.

    Pure CPU, any thread; megabyte batches take milliseconds, so keep them off the loop.
    """
    codec = CompressionType.for_id(codec)
    if codec == CompressionType.NONE:
        return data if isinstance(data, bytes | bytearray) else bytes(data)
    if not data:
        raise CorruptRecordError(f"{codec.kafka_name}: empty compressed records")
    if codec == CompressionType.GZIP:
        return _gzip_decompress(data, max_size)
    if codec == CompressionType.SNAPPY:
        return _snappy_decompress(memoryview(data), max_size)
    if codec == CompressionType.LZ4:
        return _lz4_decompress(memoryview(data), max_size)
    return _zstd_decompress(memoryview(data), max_size)


def decompress_into(
    codec: int,
    data: ReadableBuffer,
    scratch: bytearray,
    max_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
) -> memoryview:
    """`decompress`, with lz4 and zstd written into ``scratch`` (grown to the output
    bound when short, never shrunk), for a reader that decompresses batch after batch:
    no new output buffer allocated and zeroed per batch. Returns a view of the records:
    of ``scratch`` for lz4 and zstd, of ``data`` for uncompressed records, of a new
    buffer for gzip and snappy. The view must be released (``with``) before the next
    call with the same ``scratch``, and is invalid after it. Same errors and limits."""
    if codec == CompressionType.NONE:  # before for_id: the common case, once a batch
        return memoryview(data)
    codec = CompressionType.for_id(codec)
    if codec not in (CompressionType.LZ4, CompressionType.ZSTD) or not data:
        return memoryview(decompress(codec, data, max_size))
    view = memoryview(data)
    if codec == CompressionType.LZ4:
        frame_end, bound = _lz4_frame(view)
        view = view[:frame_end]  # Kafka ignores what follows the frame, the decoder would not
    else:
        bound = _zstd_bound(view)
    if bound > max_size:
        raise _too_large(codec.kafka_name, max_size)
    if len(scratch) < bound:
        scratch.extend(bytes(bound - len(scratch)))
    try:
        if codec == CompressionType.LZ4:
            written = int(cramjam.lz4.decompress_into(view, scratch))
        else:
            written = int(cramjam.zstd.decompress_into(view, scratch))
    except _CODEC_ERRORS as e:
        raise CorruptRecordError(f"{codec.kafka_name}: {e}") from None
    return memoryview(scratch)[:written]


def _too_large(codec: str, max_size: int) -> RecordTooLargeError:
    return RecordTooLargeError(
        f"{codec}: compressed records expand to more than the {max_size} bytes allowed"
    )


# --- gzip -----------------------------------------------------------------------------

_GZIP_MEMBER_START = b"\x1f\x8b\x08"


def _gzip_decompress(data: ReadableBuffer, max_size: int) -> bytes:
    parts: list[bytes] = []
    total = 0
    rest: ReadableBuffer = data
    while True:
        inflater = zlib.decompressobj(wbits=31)
        try:
            part = inflater.decompress(rest, max_size - total + 1)
        except zlib.error as e:
            raise CorruptRecordError(f"gzip: {e}") from None
        total += len(part)
        if total > max_size:
            raise _too_large("gzip", max_size)
        if not inflater.eof:
            raise CorruptRecordError("gzip: unexpected end of compressed stream")
        parts.append(part)
        rest = inflater.unused_data
        if rest[:3] != _GZIP_MEMBER_START:
            break
    return parts[0] if len(parts) == 1 else b"".join(parts)


# --- snappy ---------------------------------------------------------------------------

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER_SIZE = 16
_XERIAL_MAGIC_HEAD = _INT32.unpack(_XERIAL_MAGIC[:4])[0]
_XERIAL_CHUNK_SIZE = 32 * 1024
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)


def _xerial_compress(data: ReadableBuffer) -> bytes:
    view = memoryview(data)
    out = [_XERIAL_HEADER]
    for start in range(0, len(view), _XERIAL_CHUNK_SIZE):
        chunk = bytes(cramjam.snappy.compress_raw(view[start : start + _XERIAL_CHUNK_SIZE]))
        out.append(_INT32.pack(len(chunk)))
        out.append(chunk)
    return b"".join(out)


def _snappy_decompress(view: memoryview, max_size: int) -> bytearray:
    if len(view) >= _XERIAL_HEADER_SIZE and view[:8] == _XERIAL_MAGIC:
        _check_xerial_version(view, 0)
        chunks = _xerial_chunks(view)
    else:
        chunks = [view]
    sizes: list[int] = []
    total = 0
    for chunk in chunks:
        try:
            size = int(cramjam.snappy.decompress_raw_len(chunk))
        except _CODEC_ERRORS as e:
            raise CorruptRecordError(f"snappy: {e}") from None
        total += size
        if total > max_size:
            raise _too_large("snappy", max_size)
        sizes.append(size)
    out = bytearray(total)
    with memoryview(out) as target:
        at = 0
        for chunk, size in zip(chunks, sizes, strict=True):
            try:
                written = cramjam.snappy.decompress_raw_into(chunk, target[at : at + size])
            except _CODEC_ERRORS as e:
                raise CorruptRecordError(f"snappy: {e}") from None
            if written != size:
                raise CorruptRecordError("snappy: block shorter than its declared length")
            at += size
    return out


def _check_xerial_version(view: memoryview, pos: int) -> None:
    version = _INT32.unpack_from(view, pos + 8)[0]
    if version < 1:
        raise CorruptRecordError(f"snappy: incompatible xerial stream version {version}")


def _xerial_chunks(view: memoryview) -> list[memoryview]:
    """The raw snappy blocks of a xerial stream, following SnappyInputStream's rules."""
    chunks: list[memoryview] = []
    pos = _XERIAL_HEADER_SIZE
    end = len(view)
    while end - pos >= 4:
        size = _INT32.unpack_from(view, pos)[0]
        if size == _XERIAL_MAGIC_HEAD:
            if end - pos < _XERIAL_HEADER_SIZE:
                raise CorruptRecordError("snappy: truncated header of a concatenated stream")
            if view[pos : pos + 8] != _XERIAL_MAGIC:
                break
            _check_xerial_version(view, pos)
            pos += _XERIAL_HEADER_SIZE
            continue
        if size < 0:
            raise CorruptRecordError(f"snappy: invalid chunk size {size}")
        pos += 4
        if pos + size > end:
            raise CorruptRecordError(f"snappy: chunk of {size} bytes is truncated")
        chunks.append(view[pos : pos + size])
        pos += size
    return chunks


# --- lz4 ------------------------------------------------------------------------------

_LZ4_MAGIC = 0x184D2204
_LZ4_FLG_VERSION_1 = 0x40
_LZ4_FLG_BLOCK_INDEPENDENT = 0x20
_LZ4_FLG_BLOCK_CHECKSUM = 0x10
_LZ4_FLG_CONTENT_SIZE = 0x08
_LZ4_FLG_CONTENT_CHECKSUM = 0x04
_LZ4_BLOCK_UNCOMPRESSED = 0x80000000


def _lz4_decompress(view: memoryview, max_size: int) -> bytearray:
    frame_end, bound = _lz4_frame(view)
    if bound > max_size:
        raise _too_large("lz4", max_size)
    out = bytearray(bound)
    try:
        # Only the frame: Kafka ignores what follows it, the decoder would not.
        written = int(cramjam.lz4.decompress_into(view[:frame_end], out))
    except _CODEC_ERRORS as e:
        raise CorruptRecordError(f"lz4: {e}") from None
    del out[written:]
    return out


def _lz4_frame(view: memoryview) -> tuple[int, int]:
    """Check one frame against Kafka's Lz4BlockInputStream rules.

    Returns (frame end, output upper bound): the declared content size if present,
    else stored blocks at their size plus every compressed block at the maximum.
    """
    flg, block_max, content_size, pos = _lz4_frame_header(view)
    block_checksum = 4 if flg & _LZ4_FLG_BLOCK_CHECKSUM else 0
    end = len(view)
    bound = 0
    while True:
        if end - pos < 4:
            raise CorruptRecordError("lz4: stream ended before the frame's end mark")
        word = _UINT32_LE.unpack_from(view, pos)[0]
        pos += 4
        if word == 0:
            break
        size = word & ~_LZ4_BLOCK_UNCOMPRESSED
        if size > block_max:
            raise CorruptRecordError(f"lz4: block size {size} exceeded max: {block_max}")
        pos += size + block_checksum
        if pos > end:
            raise CorruptRecordError("lz4: truncated block")
        bound += size if word & _LZ4_BLOCK_UNCOMPRESSED else block_max
    if flg & _LZ4_FLG_CONTENT_CHECKSUM:
        pos += 4
        if pos > end:
            raise CorruptRecordError("lz4: truncated content checksum")
    return pos, bound if content_size is None else content_size


def _lz4_frame_header(view: memoryview) -> tuple[int, int, int | None, int]:
    """(FLG, maximum block size, declared content size, position of the first block)."""
    end = len(view)
    if end < 7 or _UINT32_LE.unpack_from(view, 0)[0] != _LZ4_MAGIC:
        raise CorruptRecordError("lz4: not an LZ4 frame")
    flg = view[4]
    bd = view[5]
    if flg & 0xC3 != _LZ4_FLG_VERSION_1 or not flg & _LZ4_FLG_BLOCK_INDEPENDENT:
        raise CorruptRecordError(f"lz4: unsupported frame flags {flg:#04x}")
    if bd & 0x8F or not 4 <= bd >> 4 <= 7:
        raise CorruptRecordError(f"lz4: invalid block descriptor {bd:#04x}")
    content_size = None
    pos = 6
    if flg & _LZ4_FLG_CONTENT_SIZE:
        if end - pos < 9:
            raise CorruptRecordError("lz4: truncated frame header")
        content_size = _UINT64_LE.unpack_from(view, pos)[0]
        pos += 8
    # then the header checksum byte, which the decoder verifies
    return flg, 1 << (2 * (bd >> 4) + 8), content_size, pos + 1


# --- zstd -----------------------------------------------------------------------------

_ZSTD_MAGIC = 0xFD2FB528
_ZSTD_SKIPPABLE_MASK = 0xFFFFFFF0
_ZSTD_SKIPPABLE_MAGIC = 0x184D2A50
_ZSTD_BLOCK_MAX = 128 * 1024
_ZSTD_DICT_ID_SIZES = (0, 1, 2, 4)
_ZSTD_FCS_SIZES = (0, 2, 4, 8)


def _zstd_decompress(view: memoryview, max_size: int) -> bytearray:
    bound = _zstd_bound(view)
    if bound > max_size:
        raise _too_large("zstd", max_size)
    out = bytearray(bound)
    try:
        written = int(cramjam.zstd.decompress_into(view, out))
    except _CODEC_ERRORS as e:
        raise CorruptRecordError(f"zstd: {e}") from None
    del out[written:]
    return out


def _zstd_bound(view: memoryview) -> int:
    """Upper bound of the decompressed size: declared content sizes, else block sums."""
    pos = 0
    end = len(view)
    bound = 0
    while pos < end:
        if end - pos < 8:
            raise CorruptRecordError("zstd: truncated frame")
        magic = _UINT32_LE.unpack_from(view, pos)[0]
        if magic & _ZSTD_SKIPPABLE_MASK == _ZSTD_SKIPPABLE_MAGIC:
            pos += 8 + _UINT32_LE.unpack_from(view, pos + 4)[0]
            continue
        if magic != _ZSTD_MAGIC:
            raise CorruptRecordError(f"zstd: unknown frame magic {magic:#010x}")
        frame_bound, pos = _zstd_frame_bound(view, pos + 4)
        bound += frame_bound
    if pos > end:
        raise CorruptRecordError("zstd: truncated frame")
    return bound


def _zstd_frame_bound(view: memoryview, pos: int) -> tuple[int, int]:
    """(decompressed size bound, position after the frame) for the frame header at `pos`."""
    end = len(view)
    descriptor = view[pos]
    pos += 1
    single_segment = descriptor & 0x20
    if descriptor & 0x08:
        raise CorruptRecordError("zstd: reserved frame header bit set")
    block_max = _ZSTD_BLOCK_MAX
    if not single_segment:
        window = view[pos]
        pos += 1
        window_base = 1 << (10 + (window >> 3))
        block_max = min(block_max, window_base + (window_base >> 3) * (window & 7))
    pos += _ZSTD_DICT_ID_SIZES[descriptor & 0x03]
    fcs_size = _ZSTD_FCS_SIZES[descriptor >> 6] or (1 if single_segment else 0)
    content_size = None
    if fcs_size:
        if end - pos < fcs_size:
            raise CorruptRecordError("zstd: truncated frame header")
        content_size = int.from_bytes(view[pos : pos + fcs_size], "little")
        if fcs_size == 2:
            content_size += 256
        pos += fcs_size
    blocks_bound = 0
    last = 0
    while not last:
        if end - pos < 3:
            raise CorruptRecordError("zstd: truncated block header")
        header = view[pos] | view[pos + 1] << 8 | view[pos + 2] << 16
        pos += 3
        last = header & 1
        block_type = (header >> 1) & 3
        size = header >> 3
        if block_type == 3:
            raise CorruptRecordError("zstd: reserved block type")
        # raw: `size` bytes stored; RLE: one byte repeated `size` times; compressed:
        # `size` input bytes producing at most one block
        pos += 1 if block_type == 1 else size
        blocks_bound += block_max if block_type == 2 else size
    if descriptor & 0x04:
        pos += 4
    if pos > end:
        raise CorruptRecordError("zstd: truncated frame")
    return (blocks_bound if content_size is None else content_size), pos
