"""TMA's shared-memory swizzle and the 32 banks it is there for, computed in plain Python (no GPU).

Shared memory is 32 banks of 4 bytes: byte address ``a`` sits in bank ``(a // 4) % 32``, so 128 bytes
cover every bank once, and a 16-byte chunk covers four neighbouring banks, a **bank group** (8 of them).
A warp's request is served in **passes** (Nsight Compute calls them wavefronts): each pass reads at most
one 4-byte word per bank, threads that read the same word share it (a broadcast), so the passes one
request needs are the most distinct words any one bank is asked for (NVIDIA, CUDA C++ Programming Guide,
"Shared Memory" under compute capability 5.x and later). Requests wider than 4 bytes per thread are
modelled as served 128 bytes at a time: 8-byte accesses by half-warps, 16-byte accesses by quarter-warps,
so a 16-byte read takes at least 4 passes; the course checks the model against the time on the H200
(``kernels/ops/banks_cuda.py``).

A tile whose rows are 128 bytes, stored row after row, puts the same column of every row in the same
bank: reading a column is a 32-way conflict. TMA can write the tile **swizzled** instead (CUDA Driver
API, ``CUtensorMapSwizzle``: ``CU_TENSOR_MAP_SWIZZLE_32B/64B/128B`` "swizzle 16B chunks within a 32B /
64B / 128B span"): bits 4-6 of each shared-memory byte address (the 16-byte chunk within 128 bytes)
are XORed with bits 7-9 (which 128-byte line of a 1024-byte block), one, two or three of them for the
32-, 64- and 128-byte modes, so the pattern repeats every 256, 512 or 1024 bytes. It is the layout CUTLASS
names ``Swizzle<1,4,3>``, ``Swizzle<2,4,3>`` and ``Swizzle<3,4,3>`` for its GMMA shared-memory atoms
(``cute/atom/mma_traits_sm90_gmma.hpp``), and the one ``banks_cuda.tma_layout`` reads back from a real
TMA load. With 128-byte rows and the 128-byte swizzle, chunk c of row r lands at chunk c XOR (r % 8):
eight rows, eight different bank groups.

The same XOR also says why the box's inner row is limited to the span (``cuTensorMapEncodeTiled``: with
a swizzle, boxDim[0] x element size must be at most 32, 64 or 128 bytes): the pattern repeats every 8
spans, so 8 rows of the span's width (the 8 rows a 16-byte column read takes per pass) land a column in 8
different bank groups. A wider row would repeat it within fewer rows: with 256-byte rows and the 128-byte
swizzle, byte b of row r would be keyed (2r + b // 128) mod 8, rows r and r + 4 would share a key and a
column read would be 2-way conflicted. The driver refuses such a map, and so does ``check_box``, whose
message computes the repeat and the conflict for the row it refuses."""
from dataclasses import dataclass

from .errors import TMAError

BANKS = 32
WORD = 4     # bytes per bank
CHUNK = 16   # bytes the swizzle moves as one piece: a bank group of 4 banks
LINE = BANKS * WORD  # 128 bytes: every bank once

SPANS = (0, 32, 64, 128)  # 0: no swizzle
NAMES = {0: "CU_TENSOR_MAP_SWIZZLE_NONE", 32: "CU_TENSOR_MAP_SWIZZLE_32B", 64: "CU_TENSOR_MAP_SWIZZLE_64B",
         128: "CU_TENSOR_MAP_SWIZZLE_128B"}
ENUM = {0: 0, 32: 1, 64: 2, 128: 3}  # CUtensorMapSwizzle's values (cuda.h)
ESIZE = {"int8": 1, "uint8": 1, "float8_e4m3fn": 1, "float8_e5m2": 1, "float16": 2, "bfloat16": 2,
         "int16": 2, "float32": 4, "int32": 4, "float64": 8, "int64": 8}


def span(mode):
    """The swizzle span in bytes (0 for none) of ``mode``: 0/32/64/128, "none"/"32B"/"64B"/"128B", or
    the driver's name ("CU_TENSOR_MAP_SWIZZLE_128B")."""
    if isinstance(mode, str):
        m = mode.strip().upper().removeprefix("CU_TENSOR_MAP_SWIZZLE_")
        mode = 0 if m in ("NONE", "0") else (int(m.removesuffix("B")) if m.removesuffix("B").isdigit() else m)
    if mode not in SPANS:
        raise TMAError(f"swizzle mode {mode!r}: TMA offers none, 32B, 64B and 128B (CUtensorMapSwizzle)")
    return mode


def dtype_name(dtype):
    """"float16" for torch.float16 or "float16"."""
    return str(dtype).removeprefix("torch.")


def esize(dtype):
    name = dtype_name(dtype)
    if name not in ESIZE:
        raise TMAError(f"dtype {dtype!r}: the drawing knows {', '.join(ESIZE)}")
    return ESIZE[name]


def repeat(mode):
    """Bytes after which the pattern repeats (256, 512, 1024): the alignment a swizzled buffer needs so
    that its first row gets the key 0, since TMA swizzles by the shared-memory address itself."""
    return 8 * span(mode)


def swizzled(offset, mode):
    """Where TMA puts byte ``offset`` of a box (counted from a base aligned to ``repeat(mode)``): the
    16-byte chunk bits 4.. XORed with the bits 7.. just above them, as many as the span has chunk bits."""
    s = span(mode)
    if not s:
        return offset
    return offset ^ (((offset >> 7) & (s // CHUNK - 1)) << 4)


def bank(address):
    return (address // WORD) % BANKS


def check_box(mode, row_bytes, dtype="float16"):
    """Refuse a box whose inner row TMA cannot write with this swizzle, naming the rule (TMAError)."""
    s, e, dtype = span(mode), esize(dtype), dtype_name(dtype)
    n = row_bytes // e
    if row_bytes <= 0 or row_bytes % CHUNK:
        raise TMAError(f"an inner box row of {row_bytes} bytes: TMA moves rows in multiples of 16 bytes "
                       f"({CHUNK // e if e < CHUNK else 1} {dtype} or more)")
    if n > 256:
        raise TMAError(f"an inner box row of {n} {dtype}: a TMA box is at most 256 elements per dimension")
    if s and row_bytes > s:
        keys = s // CHUNK  # 2, 4 or 8 keys: address bits 7, 7-8 or 7-9
        hi = keys.bit_length() - 1
        bits, kbits = ("bit 4", "bit 7") if hi == 1 else (f"bits 4-{3 + hi}", f"bits 7-{6 + hi}")
        rows = f"every {8 * s // row_bytes} row{'s' if 8 * s // row_bytes > 1 else ''}" if 8 * s % row_bytes == 0 \
            else "within fewer than 8 rows"
        key = (f" (byte b of row r would be keyed ({row_bytes // LINE}r + b // 128) mod {keys})"
               if row_bytes > LINE and row_bytes % LINE == 0 else "")
        # a 16-byte column read, 8 rows a pass: the most of them that would land in one bank group
        way = max(max(groups.count(g) for g in groups)
                  for c in range(0, row_bytes, CHUNK)
                  for groups in [[(swizzled(r * row_bytes + c, s) // CHUNK) % (LINE // CHUNK) for r in range(8)]])
        raise TMAError(f"an inner box row of {row_bytes} bytes ({n} {dtype}) is wider than the {s}-byte swizzle span: "
                       f"{NAMES[s]} XORs address {bits} (a 16-byte chunk's place) with address {kbits}, a "
                       f"pattern that repeats every {8 * s} bytes, 8 rows of {s} bytes; {row_bytes}-byte rows "
                       f"would repeat it {rows}{key}, so a 16-byte column read would be {way}-way "
                       f"conflicted; cuTensorMapEncodeTiled refuses it. Use a box of at most {s // e} {dtype} "
                       f"inner elements (several loads for a wider tile)" + (", or a wider swizzle" if s < 128 else ""))


@dataclass(frozen=True)
class Tile:
    """A box of ``rows`` rows of ``row_bytes`` bytes written by TMA with ``mode`` into shared memory at a
    base aligned to the pattern's repeat. Chunk (r, c) is the c-th 16 bytes of row r as it is in global
    memory; ``lands(r, c)`` says where it is in shared memory."""
    mode: int
    rows: int
    row_bytes: int
    dtype: str = "float16"

    @property
    def chunks(self):
        return self.row_bytes // CHUNK

    def address(self, r, byte):
        """Shared-memory byte offset of byte ``byte`` of row ``r``."""
        return swizzled(r * self.row_bytes + byte, self.mode)

    def lands(self, r, c):
        """(row, chunk) of the shared-memory slot, counted row-major in the box, where chunk (r, c) lands."""
        a = self.address(r, c * CHUNK)
        return a // self.row_bytes, (a % self.row_bytes) // CHUNK

    def group(self, r, c):
        """Bank group (0-7: banks 4g to 4g + 3) chunk (r, c) lands in."""
        return (self.address(r, c * CHUNK) // CHUNK) % (LINE // CHUNK)

    def banks(self, r, c):
        """The banks of chunk (r, c)'s four 4-byte words."""
        base = self.address(r, c * CHUNK)
        return tuple(bank(base + WORD * w) for w in range(CHUNK // WORD))


def tile(mode, rows, row_bytes, dtype="float16"):
    """A checked ``Tile`` (``check_box`` first)."""
    check_box(mode, row_bytes, dtype)
    if rows < 1:
        raise TMAError(f"{rows} rows: a box has at least one row")
    s = span(mode)
    if s and row_bytes < s:  # TMA accepts such a box; the course's address rule does not describe it
        raise TMAError(f"an inner box row of {row_bytes} bytes under the {s}-byte swizzle: TMA lays such rows out "
                       f"differently from the address rule drawn here (measured on an H200, 2026-11-30: 128B with "
                       f"64- and 32-byte rows, 64B with 32-byte rows), so the course shows rows of exactly the span")
    return Tile(s, rows, row_bytes, dtype_name(dtype))


def chunk_map(mode, rows, row_bytes, dtype="float16"):
    """Row by row, the shared-memory (row, chunk) slot each chunk of the global row lands in."""
    t = tile(mode, rows, row_bytes, dtype)
    return [[t.lands(r, c) for c in range(t.chunks)] for r in range(rows)]


def chunk_groups(mode, rows, row_bytes, dtype="float16"):
    """Row by row, the bank group (4 banks, 16 bytes) each 16-byte chunk of the row lands in."""
    t = tile(mode, rows, row_bytes, dtype)
    return [[t.group(r, c) for c in range(t.chunks)] for r in range(rows)]


def word_banks(mode, rows, row_bytes, dtype="float16"):
    """Row by row, the bank of each 4-byte word of the row."""
    t = tile(mode, rows, row_bytes, dtype)
    return [[b for c in range(t.chunks) for b in t.banks(r, c)] for r in range(rows)]


# ---- a warp's request: how many passes --------------------------------------------------------------

def _phases(addresses, width):
    if width not in (4, 8, 16):
        raise TMAError(f"{width}-byte accesses: shared-memory loads are 4, 8 or 16 bytes per thread here")
    per = LINE // width  # threads served together: 32, 16 or 8
    return [addresses[i:i + per] for i in range(0, len(addresses), per)]


def _most_words_in_a_bank(phase, width):
    words = {}
    for a in phase:
        for w in range(a // WORD, (a + width) // WORD):
            words.setdefault(w % BANKS, set()).add(w)
    return max(len(v) for v in words.values())


def passes(addresses, width=4):
    """Passes (wavefronts) a warp's request takes: ``addresses`` are the byte addresses its threads read,
    ``width`` bytes each; per 128-byte phase, the most distinct words asked of one bank."""
    return sum(_most_words_in_a_bank(p, width) for p in _phases(addresses, width))


def ways(addresses, width=4):
    """The conflict's degree: 1 is conflict-free, 32 is every thread of a phase in one bank."""
    return max(_most_words_in_a_bank(p, width) for p in _phases(addresses, width))


def column_addresses(mode, width, column=0, row_bytes=LINE, threads=32):
    """The addresses a warp reads when thread t takes ``width`` bytes at byte ``column`` of row t."""
    t = tile(mode, threads, row_bytes)
    return [t.address(r, column) for r in range(threads)]


def column_read(mode, width, row_bytes=LINE, threads=32):
    """What reading a column costs a warp, over every column of the row (all cost the same here):
    passes and ways per request, and the fewest passes a request of that width can take."""
    cols = range(0, row_bytes, width)
    p = [passes(column_addresses(mode, width, c, row_bytes, threads), width) for c in cols]
    w = [ways(column_addresses(mode, width, c, row_bytes, threads), width) for c in cols]
    return {"passes": max(p), "ways": max(w), "ideal": max(1, threads * width // LINE)}


# ---- the picture -----------------------------------------------------------------------------------

def draw(mode="128B", rows=8, row_bytes=128, dtype="float16"):
    """The tile as it is in global memory, one cell per 16-byte chunk, coloured by the bank group it lands
    in and labelled with its banks: without a swizzle (left) and with ``mode`` (right). Column 0 is
    outlined, and each panel's title says what a 16-byte read of that column costs. Returns a figure of
    its own (``plots.show`` displays it; safe in a widget callback), or raises TMAError for a box TMA
    refuses."""
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Rectangle

    from . import plots
    s = span(mode)
    modes = [0, s] if s else [0]
    tiles = [tile(m, rows, row_bytes, dtype) for m in modes]
    fig, axes = plots.subplots((6.4 if s else 3.6, min(3.4, 1.3 + 0.2 * rows)), 1, len(modes), layout="tight",
                               squeeze=False)
    cmap = ListedColormap(["#8dd3c7", "#ffffb3", "#bebada", "#fb8072", "#80b1d3", "#fdb462", "#b3de69", "#fccde5"])
    n = tiles[0].chunks
    font = 7 if n <= 4 and rows <= 16 else (6 if n <= 8 and rows <= 16 else 5)
    for ax, t in zip(axes[0], tiles):
        g = [[t.group(r, c) for c in range(n)] for r in range(rows)]
        ax.imshow(g, cmap=cmap, vmin=-0.5, vmax=7.5, aspect="auto")
        for r in range(rows if rows <= 16 else 0):  # past 16 rows the labels would not be legible
            for c in range(n):
                b = t.banks(r, c)
                ax.text(c, r, f"{b[0]}-{b[-1]}", ha="center", va="center", fontsize=font)
        ax.add_patch(Rectangle((-0.5, -0.5), 1, rows, fill=False, lw=2))
        cost = column_read(t.mode, 16, row_bytes, threads=min(rows, 32))
        verdict = "conflict-free" if cost["ways"] == 1 else f"{cost['ways']}-way"
        label = "no swizzle" if not t.mode else f"{t.mode}B swizzle"
        ax.set_title(f"{label}: 16-B column read {verdict}", fontsize=8)
        ax.set_xticks(range(n))
        ax.set_yticks(range(0, rows, max(1, rows // 8)))
        ax.set_xlabel(f"16-byte chunk of the row ({CHUNK // esize(dtype)} "
                      f"{t.dtype} each)", fontsize=7)
        ax.set_ylabel("row of the box", fontsize=7)
        ax.tick_params(labelsize=6)
    fig.suptitle(f"{rows} x {row_bytes} B box ({row_bytes // esize(dtype)} {tiles[0].dtype} a row): the banks each "
                 "chunk lands in, coloured by bank group", fontsize=8)
    return fig
