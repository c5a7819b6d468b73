#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets (fuzz/corpus/<target>/): a few small, valid inputs
of each kind, from which libFuzzer's mutations start. Each input's first byte is the target's mode
byte (see the target's source). Rerun after changing a format: python3 fuzz/make-seeds.py"""
import gzip
import os
import struct
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))


def put(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# --- trace: mode byte (format in bits 0-1, skip_bad bit 2, block size bits 3-7), then the file.
MOONCAKE = (b'{"timestamp": 0, "input_length": 700, "output_length": 5, "hash_ids": [0, 1]}\n'
            b'{"timestamp": 1500.5, "input_length": 1100, "output_length": 7, "hash_ids": [0, 1, 2]}\n')
QWEN = (b'{"chat_id": 10, "parent_chat_id": -1, "timestamp": 0.25, "input_length": 40, '
        b'"output_length": 3, "type": "text", "turn": 1, "hash_ids": [0, 1, 2]}\n'
        b'{"chat_id": 12, "parent_chat_id": 10, "timestamp": 1.75, "input_length": 60, '
        b'"output_length": 9, "type": "text", "turn": 2, "hash_ids": [0, 1, 2, 3]}\n')
AGENTIC = (b'{"id": "s1", "models": ["m"], "block_size": 64, "hash_id_scope": "local", '
           b'"requests": [{"t": 0.0, "type": "main", "model": "m", "in": 128, "out": 10, '
           b'"hash_ids": [0, 1], "ttft": 0.3}, {"t": 5.0, "in": 192, "out": 4, '
           b'"hash_ids": [0, 1, 2]}]}\n'
           b'{"id": "s2", "block_size": 64, "hash_id_scope": "global", "requests": ['
           b'{"t": 2.0, "in": 64, "out": 1, "hash_ids": [7]}]}\n')
ESCAPES = b'{"timestamp": 1e3, "input_length": 5, "hash_ids": [3], "x": "a\\"b\\u00e9\\n", "y": [[{}]]}\n'
put("trace", "mooncake", b"\x00" + MOONCAKE)
put("trace", "mooncake-typed", b"\x01" + MOONCAKE)
put("trace", "qwen", b"\x02" + QWEN)
put("trace", "agentic", b"\x03" + AGENTIC)
put("trace", "escapes-skip-bad", b"\x04" + ESCAPES + b"{bad\n" + MOONCAKE)
put("trace", "qwen-gzip", b"\x00" + gzip.compress(QWEN, mtime=0))
zst = subprocess.run(["zstd", "-q", "-c"], input=AGENTIC, stdout=subprocess.PIPE, check=True).stdout
put("trace", "agentic-zstd", b"\x00" + zst)


# --- wire: mode byte (0 request, 1 first request of a connection, 2 response), then a frame.
def varint(v):
    out = b""
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def field(num, wire, value):
    key = varint(num << 3 | wire)
    if wire == 0:
        return key + varint(value)
    if wire == 1:
        return key + struct.pack("<Q", value)
    return key + varint(len(value)) + value


def frame(payload, version=1, flags=0):
    return b"FCK1" + struct.pack("<HHI", version, flags, len(payload)) + payload


KEYS = bytes(range(32))  # two 16-byte keys
LAYOUT = field(1, 0, 4) + field(2, 0, 2) + field(3, 0, 4096)  # KvLayout layers, planes, slice
HELLO = field(1, 0, 1) + field(2, 2, b"tenant-a") + field(3, 2, b"fuzz")
put("wire", "hello", b"\x01" + frame(field(1, 0, 1) + field(2, 2, HELLO)))
put("wire", "lookup", b"\x00" + frame(field(1, 0, 2) + field(3, 2, field(1, 2, KEYS))))
put("wire", "exists", b"\x00" + frame(field(1, 0, 3) + field(4, 2, field(1, 2, KEYS[:16]))))
HINTS = field(1, 2, b"sess") + field(2, 2, KEYS[:16]) + field(3, 0, 2) + field(7, 0, 1)
RESERVE = field(1, 2, KEYS) + field(2, 2, LAYOUT) + field(3, 2, HINTS)
put("wire", "reserve", b"\x00" + frame(field(1, 0, 4) + field(5, 2, RESERVE)))
PUBLISH = field(1, 0, 9) + field(2, 1, 0x1234) + field(2, 1, 0x5678)
put("wire", "publish", b"\x00" + frame(field(1, 0, 5) + field(6, 2, PUBLISH)))
put("wire", "pin", b"\x00" + frame(field(1, 0, 6) + field(8, 2, field(1, 2, KEYS) + field(2, 2, LAYOUT)),
                                   flags=0))
put("wire", "stats", b"\x00" + frame(field(1, 0, 7) + field(10, 2, b"")))
put("wire", "reply-error", b"\x02" + frame(field(1, 0, 2) + field(2, 2, field(1, 0, 3) + field(2, 2, b"no"))))
LOOKUP_REPLY = field(1, 0, 2) + field(2, 0, 1) + field(3, 0, 8192) + field(4, 0, 4096)
put("wire", "reply-lookup", b"\x02" + frame(field(1, 0, 2) + field(4, 2, LOOKUP_REPLY)))
SEGMENT = field(1, 0, 1) + field(3, 0, 4096) + field(4, 0, 2) + field(8, 0, 65536)
RESERVED = field(2, 0, 0) + field(3, 0, 1)
RESERVE_REPLY = field(1, 0, 9) + field(2, 2, SEGMENT) + field(3, 2, RESERVED) + field(3, 2, b"\x08\x01")
put("wire", "reply-reserve", b"\x02" + frame(field(1, 0, 4) + field(6, 2, RESERVE_REPLY)))
MEMBER = field(1, 0, 1) + field(2, 2, b"node-a") + field(3, 2, b"\x01\x02") + field(5, 0, 1)
put("wire", "reply-cluster", b"\x02" + frame(field(1, 0, 8) + field(12, 2, field(1, 0, 1) + field(4, 2, MEMBER))))


# --- journal: mode byte (0 raw image, 1 image resealed, 2 superblock, 3 superblock resealed).
def record(rtype, seq, payload):
    pad = (-len(payload)) % 8
    hdr = struct.pack("<IHHIIQQ", 0x4A434643, rtype, 1, len(payload), 0, seq, 0)
    return hdr + payload + b"\x00" * pad


HEADER = struct.pack("<QIIQ", 42, 1, 0, 1 << 30)
SESSION = b"sess"
SEG = (struct.pack("<QIIIIQQQQIIQ", 7, 0, 2, 4, 2, 4096, 0, 8192, 65536, 1, len(SESSION), 256)
       + SESSION + struct.pack("<QQQQ", 1, 2, 3, 4) + struct.pack("<QQ", 11, 12))
JOURNAL = (record(1, 1, HEADER) + record(2, 2, SEG) + record(3, 3, struct.pack("<Q", 7))
           + record(2, 4, SEG) + record(4, 5, b""))
put("journal", "resealed", b"\x01" + JOURNAL)
put("journal", "resealed-torn", b"\x01" + JOURNAL[:-20])
put("journal", "raw", b"\x00" + JOURNAL)
SUPER = struct.pack("<QIIQIIQ", 0x00314C4F4F504346, 1, 0, 42, 1, 0, 1 << 30)
SUPER += b"\x00" * (4096 - len(SUPER))
put("journal", "superblock", b"\x03" + SUPER)

# --- options: mode byte (a row of the option table, or one of the parsers after it), the text.
for i, text in enumerate([b"256MiB", b"4 GiB", b"0", b"true", b"auto", b"/tmp/a, /tmp/b", b"0.5",
                          b"18446744073709551615", b"1k", b"every", b"fcfs", b"uring"]):
    put("options", "row-%02d" % i, bytes([i * 3]) + text)

# --- serve_config: mode byte (0-1 TOML, 2 file mode, 3 host:port and log level), the text.
with open(os.path.join(HERE, "..", "docs", "serve.example.toml"), "rb") as f:
    put("serve_config", "example", b"\x00" + f.read())
put("serve_config", "small", b"\x00" + b'socket_path = "/tmp/fc.sock"\nsocket_mode = "0660"\n'
    b'max_clients = 8\n[store]\ndram_bytes = "64MiB"\nssd_dirs = ["/tmp/a"]\n'
    b'[allow]\nuids = [0]\n[tenants.a]\ndram_bytes = "1MiB"\n')
put("serve_config", "mode", b"\x02" + b"0640")
put("serve_config", "hostport", b"\x03" + b"[::1]:9100")

# --- pool_recover: a journal image (no mode byte) for fuzz_pool_recover's pool: 16 KiB blocks
# (2 layers, 2 planes, 4 KiB slices), segments of 4 blocks (64 KiB extents); the target puts its
# pool's store id into header records and recomputes every checksum.
def segment(uid, seg_no, base, nblocks=4, session=b"a"):
    run = (nblocks * 4096 + 4095) // 4096 * 4096
    body = struct.pack("<QIIIIQQQQIIQ", uid, seg_no, nblocks, 2, 2, 4096, base, run, 4 * run, 1,
                       len(session), 64)
    keys = b"".join(struct.pack("<QQ", uid, i) for i in range(nblocks))
    sums = b"".join(struct.pack("<Q", 1000 + i) for i in range(nblocks))
    return body + session + keys + sums


HEADER_POOL = struct.pack("<QIIQ", 0, 4, 0, 2 << 20)
POOL = (record(1, 1, HEADER_POOL) + record(2, 2, segment(1, 0, 0)) + record(2, 3, segment(1, 1, 65536))
        + record(2, 4, segment(2, 0, 2 << 20, session=b"b")) + record(3, 5, struct.pack("<Q", 2)))
put("pool_recover", "two-scopes", POOL)
put("pool_recover", "cleared", POOL + record(4, 6, b"") + record(2, 7, segment(3, 0, 131072)))
