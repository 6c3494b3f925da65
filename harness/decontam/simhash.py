"""SimHash fingerprints and near-duplicate search, bit-identical to PyPI ``simhash==2.1.2``.

Size (why one file of ~630 lines): the package's reference algorithm, its vectorised equal and the
index are kept together so that each fast path sits beside the exact definition it is tested
against (tests/test_simhash.py compares them value by value).

tDRO's decontamination (followed by LightRetriever) hashes every query with
``Simhash(format_query(q))`` using the package defaults and calls a training query a
duplicate when ``SimhashIndex(test, k=2).get_near_dups`` finds any test query. This
module computes the same 64-bit values and the same duplicate sets, vectorised with
numpy so that ~9.2M training queries take minutes instead of hours.

What the package computes, and what we reproduce (``simhash/__init__.py``):

* text -> ``lower()`` -> keep the matches of ``[\\w\\u4e00-\\u9fcc]+`` joined with no
  separator -> the overlapping 4-character windows (one window, the whole string,
  when it is shorter than 4 characters, including the empty string);
* each distinct window is hashed with MD5 of its UTF-8 bytes, last 8 bytes, read as a
  big-endian 64-bit integer ``h``; bit ``b`` of the fingerprint is set when more than
  half of the windows (counted with multiplicity) have bit ``b`` of ``h`` set;
* ``SimhashIndex(k)`` splits the 64 bits into ``k + 1`` blocks and keeps a candidate
  when it agrees exactly on one block and its Hamming distance is ``<= k``. By the
  pigeonhole principle that returns exactly the test items within distance ``k``;
  ``near_duplicates`` returns that set (it uses its own block tables, which cannot
  change the set).

One deliberate difference: under NumPy 2 the package raises ``OverflowError`` for a text
in which one window occurs more than 255 times (``uint8 * 256`` overflows, e.g. 300 ``a``).
We return the value the package's algorithm defines (and computes under NumPy 1, or for
``Simhash(list_of_windows)``): plain integer counts never overflow here.
"""
from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Sequence

import numpy as np

from harness.errors import ConfigError, DataError

F = 64
"""Fingerprint width in bits (the package default)."""

_WORD = r"[\w\u4e00-\u9fcc]"
_WORD_RE = re.compile(_WORD + "+")  # the package's default `reg`
# jionlp's CHINESE_CHAR_PATTERN ('[一-龥]'): tDRO runs jieba only when this matches.
_HAN_RE = re.compile("[\u4e00-\u9fa5]")
_CAPITAL_SIGMA, _SMALL_SIGMA = "\u03a3", "\u03c3"
_SEP = "\x00"  # batch separator: not a word character, neither cased nor case-ignorable
_LANES = np.uint64(0x0101010101010101)
_MAX_LANE = 255  # windows summed per byte lane before a carry could spill
_DEFAULT_BATCH = 4096  # texts per vectorised batch: its arrays stay in the CPU caches


def format_query(text: str) -> str:
    """tDRO's ``format_query``: drop ``_``; Chinese text then goes through jieba.

    tDRO writes ``" ".join(jieba.lcut(q))`` for text with a character in U+4E00..U+9FA5.
    jieba only splits (its tokens concatenate back to the input) and the hash keeps word
    characters joined with no separator, so the inserted spaces vanish from the hash:
    jieba is not needed. The one place the spaces could show is ``str.lower()``'s
    context rule for capital sigma (``Σ`` becomes final ``ς`` after a cased letter when no
    cased letter follows). jieba yields every non-Han, non-ASCII-alphanumeric character
    as its own token, so after the join every ``Σ`` follows a space and lower-cases to
    ``σ``; we write that ``σ`` directly, which makes the hash equal to tDRO's.
    """
    text = text.replace("_", "")
    if _CAPITAL_SIGMA in text and _HAN_RE.search(text):
        text = text.replace(_CAPITAL_SIGMA, _SMALL_SIGMA)
    return text


def windows(formatted: str) -> list[str]:
    """The package's features of an (already formatted) text, in order, with repeats."""
    content = "".join(_WORD_RE.findall(formatted.lower()))
    return [content[i:i + 4] for i in range(max(len(content) - 3, 1))]


def feature_hash(feature: str) -> int:
    """The package's ``_hashfunc`` value of one feature: MD5, last 8 bytes, big-endian."""
    return int.from_bytes(hashlib.md5(feature.encode("utf-8")).digest()[-8:], "big")


def _fingerprint_reference(formatted: str) -> int:
    """Plain-Python fingerprint of a formatted text (the fallback and the test oracle)."""
    feats = windows(formatted)
    counts = [0] * F
    for feat in feats:
        h = feature_hash(feat)
        for b in range(F):
            if h >> b & 1:
                counts[b] += 1
    value = 0
    for b in range(F):
        if 2 * counts[b] > len(feats):
            value |= 1 << b
    return value


def fingerprint(text: str) -> int:
    """``simhash.Simhash(format_query(text)).value`` (64-bit, as a Python int)."""
    return int(fingerprints([text])[0])


# ----------------------------------------------------------------------------------------
# vectorised fingerprints

_DROP = np.uint32(0xFFFFFFFF)  # _char_map: the character leaves no word character
_SPECIAL = np.uint32(0xFFFFFFFE)  # _char_map: needs the string path (context or expansion)
_bmp_word_table: np.ndarray | None = None
_bmp_char_map: np.ndarray | None = None


def _is_word(c: int) -> bool:
    return re.fullmatch(_WORD, chr(c)) is not None


def _word_table() -> np.ndarray:
    """Boolean table over the BMP: does the package's regex keep this character?"""
    global _bmp_word_table
    if _bmp_word_table is None:
        kept = "".join(re.findall(_WORD, "".join(map(chr, range(0x10000)))))
        table = np.zeros(0x10000, dtype=bool)
        table[np.frombuffer(kept.encode("utf-16-le"), dtype="<u2")] = True
        _bmp_word_table = table
    return _bmp_word_table


def _map_char(c: int) -> np.uint32:
    """What ``format_query`` + ``lower()`` + the regex make of one character, out of context."""
    if c == 0x5F or c == 0x03A3:  # '_' is removed before lower(); capital sigma depends on context
        return _DROP if c == 0x5F else _SPECIAL
    kept = "".join(_WORD_RE.findall(chr(c).lower()))
    if not kept:
        return _DROP
    return np.uint32(ord(kept)) if len(kept) == 1 else _SPECIAL


def _char_map() -> np.ndarray:
    """BMP code point -> lower-cased kept code point, _DROP or _SPECIAL (NUL -> NUL)."""
    global _bmp_char_map
    if _bmp_char_map is None:
        words = _word_table()
        lowered = [chr(c).lower() for c in range(0x10000)]
        table = np.full(0x10000, _DROP, dtype=np.uint32)
        single = np.array([len(x) == 1 for x in lowered])
        low = np.array([ord(x) if len(x) == 1 else 0 for x in lowered], dtype=np.uint32)
        ok = single & (low <= 0xFFFF)
        ok_word = ok.copy()
        ok_word[ok] = words[low[ok]]
        table[ok_word] = low[ok_word]
        for c in np.flatnonzero(~ok).tolist():
            table[c] = _map_char(c)
        table[0x5F] = _DROP
        table[0x03A3] = _SPECIAL
        table[0] = 0  # our batch separator
        _bmp_char_map = table
    return _bmp_char_map


def _keep_word_chars(cps: np.ndarray) -> np.ndarray:
    """The code points the package's regex keeps (plus our NUL separators), in order."""
    words = _word_table()
    wide = cps > 0xFFFF
    keep = words[np.where(wide, 0, cps)] | (cps == 0)
    if wide.any():
        for c in np.unique(cps[wide]).tolist():  # rare: ask the regex about each such character
            keep[cps == c] = _is_word(c)
    return cps[keep]


def _codepoints_fast(joined: str) -> np.ndarray | None:
    """Formatted, lower-cased, filtered code points of a NUL-joined batch, or None when
    the batch needs the string path (capital sigma, a character whose lower case is
    longer than one kept character)."""
    cps = np.frombuffer(joined.encode("utf-32-le", "surrogatepass"), dtype="<u4")
    table = _char_map()
    wide = cps > 0xFFFF
    if wide.any():
        mapped = table[np.where(wide, 0, cps)]
        for c in np.unique(cps[wide]).tolist():
            mapped[cps == c] = _map_char(c)
    else:
        mapped = table[cps]
    if (mapped == _SPECIAL).any():
        return None
    return mapped[mapped != _DROP]


def _codepoints_exact(texts: list[str]) -> np.ndarray:
    """The same as _codepoints_fast, through the strings: format_query, lower(), regex."""
    # NUL is dropped by the regex anyway; U+0001 behaves the same for lower() (neither
    # cased nor case-ignorable) and frees NUL for the separator.
    joined = _SEP.join(format_query(t.replace(_SEP, "\x01")) for t in texts)
    # lower() looks past a character only for capital sigma, and never past NUL
    cps = np.frombuffer(joined.lower().encode("utf-32-le", "surrogatepass"), dtype="<u4")
    return _keep_word_chars(cps)


# MD5 (RFC 1321) of many short messages at once: one 64-byte block each, numpy uint32 lanes.
_MD5_S = [7, 12, 17, 22] * 4 + [5, 9, 14, 20] * 4 + [4, 11, 16, 23] * 4 + [6, 10, 15, 21] * 4
_MD5_K = [int(abs(math.sin(i + 1)) * 2**32) & 0xFFFFFFFF for i in range(64)]
_MD5_INIT = (0x67452301, 0xEFCDAB89, 0x98BADCFE, 0x10325476)


def md5_tail64(units: np.ndarray) -> np.ndarray:
    """``feature_hash`` of many features given as rows of up to 4 BMP code units (0 = none).

    The UTF-8 bytes (at most 12) are laid out in one padded MD5 block per row and the 64
    MD5 steps run on numpy uint32 arrays; the result is the big-endian value of digest
    bytes 8..15, as the package reads them. Several times faster than one hashlib call
    per feature. Surrogate code units are not word characters and never occur here.
    """
    units = np.asarray(units, dtype=np.uint32)
    n = len(units)
    nbytes = (units > 0).astype(np.int64) + (units >= 0x80) + (units >= 0x800)  # UTF-8 length per unit
    length = nbytes.sum(axis=1)
    utf8 = np.frombuffer(
        units[units > 0].astype("<u2").tobytes().decode("utf-16-le").encode("utf-8"), dtype=np.uint8
    )
    # bytes 0..15 of each block: the message, then 0x80; bytes 56..63: the length in bits
    block = np.zeros((n, 16), dtype=np.uint8)
    first = np.cumsum(length) - length
    block.reshape(-1)[np.repeat(np.arange(n) * 16 - first, length) + np.arange(len(utf8))] = utf8
    block[np.arange(n), length] = 0x80
    words = np.ascontiguousarray(block.view("<u4").T)  # message words 0..3, shape (4, n)
    m = {g: words[g] for g in range(4) if words[g].any()}
    m[14] = (length * 8).astype(np.uint32)
    a, b, c, d = (np.full(n, v, dtype=np.uint32) for v in _MD5_INIT)
    t = np.empty(n, dtype=np.uint32)
    for i in range(64):
        f = np.empty(n, dtype=np.uint32)
        if i < 32:  # F = (b & c) | (~b & d); G = (d & b) | (~d & c)
            x, y, z = (b, c, d) if i < 16 else (d, b, c)
            np.bitwise_and(x, y, out=f)
            np.bitwise_and(np.invert(x, out=t), z, out=t)
            f |= t
            g = i if i < 16 else (5 * i + 1) % 16
        elif i < 48:  # H = b ^ c ^ d
            np.bitwise_xor(b, c, out=f)
            f ^= d
            g = (3 * i + 5) % 16
        else:  # I = c ^ (b | ~d)
            np.bitwise_or(b, np.invert(d, out=t), out=f)
            f ^= c
            g = (7 * i) % 16
        f += a
        f += np.uint32(_MD5_K[i])
        if g in m:
            f += m[g]
        s = _MD5_S[i]
        np.left_shift(f, np.uint32(s), out=t)
        f >>= np.uint32(32 - s)
        f |= t
        f += b
        a, d, c, b = d, c, b, f
    c += np.uint32(_MD5_INIT[2])
    d += np.uint32(_MD5_INIT[3])
    # digest bytes 8..15 are c, d little-endian; the package reads them big-endian
    return (c.byteswap().astype(np.uint64) << np.uint64(32)) | d.byteswap().astype(np.uint64)


class _HashCache:
    """Window key (4 UTF-16 code units packed in 64 bits) -> MD5-based feature hash.

    A vectorised open-addressing table (linear probing, load <= 1/2) of (key, value)
    rows. Keys not seen before are hashed once (``md5_tail64``) and inserted. A key's
    value is always ``feature_hash(decode(key))``, so the cache can never give a wrong value.
    """

    _EMPTY = np.uint64(0xFFFFFFFFFFFFFFFF)  # 4 x U+FFFF: not word characters, never a key
    _MULT = np.uint64(0x9E3779B97F4A7C15)

    def __init__(self, bits: int = 18) -> None:
        self._alloc(bits)
        self.count = 0

    def _alloc(self, bits: int) -> None:
        self.bits = bits
        self.mask = np.uint64((1 << bits) - 1)
        self.table = np.zeros((1 << bits, 2), dtype=np.uint64)
        self.table[:, 0] = self._EMPTY

    def _home(self, keys: np.ndarray) -> np.ndarray:
        return (keys * self._MULT) >> np.uint64(64 - self.bits)

    @staticmethod
    def _hash_keys(keys: np.ndarray) -> np.ndarray:
        """``feature_hash`` of each key's feature (decoded back from its code units)."""
        units = np.empty((len(keys), 4), dtype=np.uint32)
        for j in range(4):
            units[:, j] = (keys >> np.uint64(48 - 16 * j)) & np.uint64(0xFFFF)
        if len(keys) < 256:  # a few keys: hashlib beats numpy's per-call overhead
            feats = units.astype("<u2").tobytes().decode("utf-16-le")
            return np.array([feature_hash(feats[i:i + 4].rstrip(_SEP)) for i in range(0, len(feats), 4)],
                            dtype=np.uint64)
        return np.concatenate([md5_tail64(units[a:a + 65536]) for a in range(0, len(units), 65536)])

    def _insert(self, keys: np.ndarray, vals: np.ndarray) -> None:
        """Insert distinct keys that are not in the table yet."""
        if 2 * (self.count + len(keys)) > len(self.table):
            old = self.table[self.table[:, 0] != self._EMPTY]
            bits = self.bits
            while 2 * (self.count + len(keys)) > (1 << bits):
                bits += 1
            self._alloc(bits)
            self.count = 0
            self._insert(old[:, 0].copy(), old[:, 1].copy())
        tkeys = self.table[:, 0]
        slot = self._home(keys)
        pending = np.arange(len(keys))
        while len(pending):
            s = slot[pending]
            free = tkeys[s] == self._EMPTY
            cand, cs = pending[free], s[free]
            # several keys may want one free slot: the write that lands wins, others move on
            tkeys[cs] = keys[cand]
            landed = tkeys[cs] == keys[cand]
            self.table[cs[landed], 1] = vals[cand[landed]]
            lost = np.ones(len(pending), dtype=bool)
            lost[np.flatnonzero(free)[landed]] = False
            pending = pending[lost]
            slot[pending] = (slot[pending] + np.uint64(1)) & self.mask
        self.count += len(keys)

    def lookup(self, keys: np.ndarray) -> np.ndarray:
        slot = self._home(keys)
        rows = np.take(self.table, slot, axis=0)
        vals = rows[:, 1].copy()
        todo = np.flatnonzero(rows[:, 0] != keys)
        miss: list[np.ndarray] = []
        while len(todo):
            rows = np.take(self.table, slot[todo], axis=0)
            empty = rows[:, 0] == self._EMPTY
            if empty.any():
                miss.append(todo[empty])
            hit = rows[:, 0] == keys[todo]
            if hit.any():
                vals[todo[hit]] = rows[hit, 1]
            todo = todo[~(hit | empty)]
            slot[todo] = (slot[todo] + np.uint64(1)) & self.mask
        if miss:
            where = np.concatenate(miss)
            new = np.sort(keys[where])
            new = new[np.concatenate(([True], new[1:] != new[:-1]))]
            self._insert(new, self._hash_keys(new))
            vals[where] = self.lookup(keys[where])
        return vals


_cache = _HashCache()


def _bad_text(texts: Sequence[object]) -> DataError:
    i, t = next((i, t) for i, t in enumerate(texts) if not isinstance(t, str))
    return DataError(f"text #{i} is {type(t).__name__}, not str", fix="give every record a string 'text' field")


def _batch_fingerprints(texts: list[str], cache: _HashCache) -> np.ndarray:
    """Fingerprints of one batch of raw texts (``format_query`` is applied here).

    The batch is joined with NUL and processed as one code-point array: a table maps each
    character to what ``format_query``, ``lower()`` and the regex make of it (batches
    with capital sigma, whose lower case depends on its neighbours, go through the
    strings instead), windows are packed into 64-bit keys (4 UTF-16 units), hashed
    through the cache, then counted.
    """
    n = len(texts)
    try:
        joined = _SEP.join(texts)
    except TypeError:
        raise _bad_text(texts) from None
    cps = _codepoints_fast(joined)
    if cps is None or np.count_nonzero(cps == 0) != n - 1:  # sigma, expansions, NUL in a text
        cps = _codepoints_exact(texts)

    total = len(cps)
    is_sep = cps == 0
    seps = np.flatnonzero(is_sep)
    starts = np.empty(n, dtype=np.int64)
    starts[0] = 0
    starts[1:] = seps + 1
    length = np.empty(n, dtype=np.int64)
    length[:-1] = seps
    length[-1] = total
    length -= starts
    nwin = np.maximum(length - 3, 1)

    slow = None
    if total and int(cps.max()) > 0xFFFF:
        # Characters outside the BMP do not fit a 16-bit slot: such texts take the plain
        # path. Clip them to U+0001 (never in content) so the discarded keys stay harmless.
        wide = np.flatnonzero(cps > 0xFFFF)
        slow = np.unique(np.searchsorted(starts, wide, side="right") - 1)
        cps = np.where(cps > 0xFFFF, np.uint32(1), cps)

    # key of the window starting at every position (4 code units, zero-padded at the end)
    pad = np.zeros(total + 4, dtype=np.uint64)
    pad[:total] = cps
    allkeys = pad[: total + 1] << np.uint64(48)
    allkeys |= pad[1: total + 2] << np.uint64(32)
    allkeys |= pad[2: total + 3] << np.uint64(16)
    allkeys |= pad[3: total + 4]
    # full windows contain no separator; a text shorter than 4 has one window at its start
    sep_pad = np.ones(total + 4, dtype=np.int32)
    sep_pad[:total] = is_sep
    csum = np.zeros(total + 5, dtype=np.int32)
    np.cumsum(sep_pad, out=csum[1:])
    mask = np.zeros(total + 1, dtype=bool)
    if total >= 4:
        mask[: total - 3] = csum[4: total + 1] == csum[: total - 3]
    short = np.flatnonzero(length < 4)
    mask[starts[short]] = True
    keys = allkeys[mask]
    offsets = np.zeros(n, dtype=np.int64)
    np.cumsum(nwin[:-1], out=offsets[1:])
    if len(short):
        # keep only the text's own 0-3 code units: mask = ~0 << 16 * (4 - length)
        keep = length[short]
        m = np.where(keep == 0, np.uint64(0), ~np.uint64(0) << (np.uint64(16) * (4 - keep).astype(np.uint64)))
        keys[offsets[short]] &= m

    out = _majority_bits(cache.lookup(keys), offsets, nwin)
    if slow is not None:
        for i in slow.tolist():
            out[i] = _fingerprint_reference(format_query(texts[i]))
    return out


def _majority_bits(hashes: np.ndarray, offsets: np.ndarray, nwin: np.ndarray) -> np.ndarray:
    """Per text, set bit b when more than half of its window hashes have bit b set.

    Byte lane b holds bits b, 8+b, ..., 56+b of a hash, one per byte, so one uint64 add
    counts eight bits. A text is cut into runs of <= 255 windows so no byte overflows;
    the runs of a long text are added afterwards.
    """
    n = len(offsets)
    if int(nwin.max()) <= _MAX_LANE:
        run_off = offsets
    else:
        nsub = (nwin + _MAX_LANE - 1) // _MAX_LANE
        sub_first = np.zeros(n, dtype=np.int64)
        np.cumsum(nsub[:-1], out=sub_first[1:])
        within = np.arange(int(nsub.sum())) - np.repeat(sub_first, nsub)
        run_off = np.repeat(offsets, nsub) + _MAX_LANE * within
    m = len(run_off)
    sums = np.empty((8, m), dtype=np.uint64)
    tmp = np.empty_like(hashes)
    for b in range(8):
        np.right_shift(hashes, np.uint64(b), out=tmp)
        np.bitwise_and(tmp, _LANES, out=tmp)
        sums[b] = np.add.reduceat(tmp, run_off)
    # byte j (little-endian) of lane b counts bit 8j + b
    counts = sums.view(np.uint8).reshape(8, m, 8).transpose(1, 2, 0).reshape(m, F)
    if m != n:
        counts = np.add.reduceat(counts.astype(np.int64), sub_first, axis=0)
    bits = counts > (nwin // 2)[:, None]  # 2 * count > nwin, without uint8 overflow
    return np.packbits(bits, axis=1, bitorder="little").view("<u8").reshape(n).astype(np.uint64)


def fingerprints(texts: Sequence[str], *, batch_size: int = _DEFAULT_BATCH, workers: int = 1) -> np.ndarray:
    """Vectorised ``fingerprint`` over many texts: a uint64 array, one value per text.

    ``workers > 1`` splits the texts over that many processes (each keeps its own cache).
    """
    if isinstance(texts, str):
        raise ConfigError("fingerprints() takes a sequence of texts, not one str", fix="use fingerprint(text)")
    if not isinstance(texts, list):
        texts = list(texts)
    if batch_size < 1:
        raise ConfigError(f"batch_size must be >= 1, got {batch_size}")
    if workers > 1 and len(texts) > 4 * batch_size:
        return _fingerprints_parallel(texts, batch_size, workers)
    out = np.empty(len(texts), dtype=np.uint64)
    for a in range(0, len(texts), batch_size):
        out[a:a + batch_size] = _batch_fingerprints(texts[a:a + batch_size], _cache)
    return out


def _worker_batch(args: tuple[list[str], int]) -> np.ndarray:
    texts, batch_size = args
    return fingerprints(texts, batch_size=batch_size)


def pool_start_method() -> str:
    """How worker pools start: ``forkserver`` where the platform has it, else its default. Not
    ``fork``: a process that already runs threads (torch's OpenMP pool, the JVM of pyserini, a test
    runner) can fork a child while another thread holds a lock the child then waits on forever;
    seen in CI as a decontamination pool that never returned. A forkserver is a fresh
    single-threaded process, so its children start clean."""
    import multiprocessing as mp

    return "forkserver" if "forkserver" in mp.get_all_start_methods() else mp.get_start_method()


def _fingerprints_parallel(texts: list[str], batch_size: int, workers: int) -> np.ndarray:
    import multiprocessing as mp

    chunk = max(batch_size, -(-len(texts) // (workers * 4)))
    parts = [(texts[a:a + chunk], batch_size) for a in range(0, len(texts), chunk)]
    ctx = mp.get_context(pool_start_method())  # not fork: see pool_start_method
    with ctx.Pool(workers) as pool:
        results = pool.map(_worker_batch, parts)
    return np.concatenate(results) if results else np.empty(0, dtype=np.uint64)


# ----------------------------------------------------------------------------------------
# near-duplicate search


def _check_k(k: int) -> int:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 0:
        raise ConfigError(f"k must be an integer >= 0 (Hamming distance), got {k!r}", fix="use e.g. --k 2")
    return int(k)


class FingerprintIndex:
    """Exact-match tables on ``k + 1`` bit blocks of the test fingerprints (pigeonhole).

    Two fingerprints within Hamming distance ``k`` agree on at least one of ``k + 1``
    disjoint blocks, so looking up each block and checking the distance finds exactly
    the test items with distance ``<= k`` -- the set ``SimhashIndex.get_near_dups`` gives.
    The blocks are the package's (``64 // (k + 1)`` bits, the last takes the remainder).
    Each block is bucketed on its low ``p`` bits (a direct-address CSR table, ``p <= 22``);
    a candidate is kept when its whole block agrees, its distance is ``<= k`` and no
    earlier block agrees (so each pair is reported once).
    """

    def __init__(self, fps: np.ndarray, k: int = 2) -> None:
        self.k = _check_k(k)
        self.fps = np.ascontiguousarray(fps, dtype=np.uint64)
        nb = min(self.k + 1, F)
        width = F // nb
        self.offsets = [width * i for i in range(nb)]
        self.masks: list[np.uint64] = []
        self.bucket_masks: list[np.uint64] = []
        self.starts: list[np.ndarray] = []
        self.order: list[np.ndarray] = []
        p_max = min(22, max(8, len(self.fps).bit_length() + 2))
        for i, off in enumerate(self.offsets):
            bw = (self.offsets[i + 1] if i + 1 < nb else F) - off
            p = min(bw, p_max)
            self.masks.append(np.uint64((1 << bw) - 1))
            self.bucket_masks.append(np.uint64((1 << p) - 1))
            bucket = ((self.fps >> np.uint64(off)) & self.bucket_masks[-1]).astype(np.int64)
            self.order.append(np.argsort(bucket, kind="stable"))
            starts = np.zeros((1 << p) + 1, dtype=np.int64)
            np.cumsum(np.bincount(bucket, minlength=1 << p), out=starts[1:])
            self.starts.append(starts)

    def __len__(self) -> int:
        return len(self.fps)

    def query(
        self, fps: np.ndarray, *, chunk: int = 1 << 20, max_candidates: int = 1 << 23
    ) -> tuple[np.ndarray, np.ndarray]:
        """All pairs (i, j) with ``popcount(fps[i] ^ test[j]) <= k``, sorted by (i, j)."""
        fps = np.ascontiguousarray(fps, dtype=np.uint64)
        empty = np.empty(0, dtype=np.int64)
        if len(fps) == 0 or len(self.fps) == 0:
            return empty, empty.copy()
        if self.k >= F:  # every pair is within distance 64
            return np.repeat(np.arange(len(fps)), len(self.fps)), np.tile(np.arange(len(self.fps)), len(fps))
        out_i: list[np.ndarray] = []
        out_j: list[np.ndarray] = []
        for a0 in range(0, len(fps), chunk):
            part = fps[a0:a0 + chunk]
            ranges = []
            for off, bmask, starts in zip(self.offsets, self.bucket_masks, self.starts):
                bucket = ((part >> np.uint64(off)) & bmask).astype(np.int64)
                ranges.append((starts[bucket], starts[bucket + 1]))
            cum = np.cumsum(sum(hi - lo for lo, hi in ranges))
            a = 0
            while a < len(part):  # sub-chunks of bounded candidate count
                base = cum[a - 1] if a else 0
                b = max(int(np.searchsorted(cum, base + max_candidates, side="right")), a + 1)
                pi, pj = self._pairs(part, ranges, a, b)
                out_i.append(pi + a0)
                out_j.append(pj)
                a = b
        qi = np.concatenate(out_i)
        tj = np.concatenate(out_j)
        order = np.lexsort((tj, qi))
        return qi[order], tj[order]

    def _pairs(self, fps: np.ndarray, ranges: list, a: int, b: int) -> tuple[np.ndarray, np.ndarray]:
        pis, pjs = [], []
        for blk, (lo_all, hi_all) in enumerate(ranges):
            lo, hi = lo_all[a:b], hi_all[a:b]
            cnt = hi - lo
            m = int(cnt.sum())
            if m == 0:
                continue
            qi = np.repeat(np.arange(a, b), cnt)
            first = np.zeros(len(cnt), dtype=np.int64)
            np.cumsum(cnt[:-1], out=first[1:])
            tj = self.order[blk][np.repeat(lo - first, cnt) + np.arange(m)]
            x = fps[qi] ^ self.fps[tj]
            ok = np.bitwise_count(x) <= self.k
            ok &= ((x >> np.uint64(self.offsets[blk])) & self.masks[blk]) == 0
            for prev in range(blk):  # report a pair in the first block where they agree
                ok &= ((x >> np.uint64(self.offsets[prev])) & self.masks[prev]) != 0
            pis.append(qi[ok])
            pjs.append(tj[ok])
        if not pis:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
        return np.concatenate(pis).astype(np.int64), np.concatenate(pjs).astype(np.int64)


def group_pairs(qi: np.ndarray, tj: np.ndarray, n: int) -> list[list[int]]:
    """Pairs sorted by query -> one sorted list of test indices per query."""
    out: list[list[int]] = [[] for _ in range(n)]
    if len(qi):
        bounds = np.flatnonzero(np.diff(qi)) + 1
        starts = np.concatenate(([0], bounds))
        ends = np.concatenate((bounds, [len(qi)]))
        tj_list = tj.tolist()
        for s, e in zip(starts.tolist(), ends.tolist()):
            out[int(qi[s])] = tj_list[s:e]
    return out


def near_duplicates(train: Sequence[str], test: Sequence[str], k: int = 2) -> list[list[int]]:
    """For each training text, the sorted indices of test texts within Hamming distance ``k``.

    Same sets as ``SimhashIndex([(str(j), Simhash(format_query(t))) ...], k=k)
    .get_near_dups(Simhash(format_query(q)))`` (ids as ints, sorted).
    """
    k = _check_k(k)
    index = FingerprintIndex(fingerprints(test), k)
    qi, tj = index.query(fingerprints(train))
    return group_pairs(qi, tj, len(train))
