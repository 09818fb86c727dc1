"""The check behind exercises/07_shapes_and_waves.ipynb: the learner's ``waves`` and ``split_plan``
against the course's (``gemm.waves``, ``gemm.split_plan``) on many shapes, edges included (M not a multiple
of BLOCK_M, fewer tiles than SMs, a last wave that is full, a split that would exceed the K tiles), and a
prediction at 3072^3. A wrong answer a learner is likely to write is named, with a shape that shows it."""
import re

from ..lab import check as lab_check
from ..ops import gemm

SMS = 132
# M, N, BLOCK_M, BLOCK_N, sms
WAVE_CASES = [(3072, 3072, 128, 128, SMS), (3072, 3072, 128, 256, SMS), (1000, 1000, 128, 128, SMS),
              (8192, 8192, 128, 256, SMS), (16, 4096, 64, 64, SMS), (4096, 11008, 128, 128, SMS),
              (2048, 2048, 128, 256, SMS), (128 * 12, 128 * 11, 128, 128, SMS), (100, 300, 64, 128, 4),
              (130, 130, 64, 64, 9), (4096, 4096, 128, 128, 128), (5000, 3000, 128, 64, SMS)]
# M, N, K, BLOCK_M, BLOCK_N, BLOCK_K, sms
SPLIT_CASES = [(3072, 3072, 3072, 128, 128, 64, SMS), (3072, 3072, 3072, 128, 256, 64, SMS),
               (1024, 1024, 1024, 128, 128, 64, SMS), (1024, 1024, 128, 128, 128, 64, SMS),
               (4096, 4096, 4096, 128, 128, 64, 128), (2048, 2048, 2048, 128, 256, 64, SMS),
               (1000, 1000, 200, 128, 128, 64, SMS), (256, 256, 4096, 128, 128, 64, SMS),
               (8192, 8192, 1024, 128, 256, 64, SMS), (4096, 11008, 4096, 128, 128, 64, SMS),
               (100, 300, 64, 64, 128, 64, 5), (16, 4096, 4096, 64, 64, 128, SMS),
               (256, 256, 100, 128, 128, 64, SMS), (256, 256, 192, 128, 128, 64, SMS)]


def _cdiv(a, b):
    return -(-a // b)


# ---- wrong answers learners write, each with what it gets wrong --------------------------------------------
def _floor_tiles(M, N, BM, BN, sms):
    t = (M // BM) * (N // BN)
    return t, t // sms, t % sms


def _last_wave_full(M, N, BM, BN, sms):
    t = _cdiv(M, BM) * _cdiv(N, BN)
    return t, _cdiv(t, sms), t % sms


def _idle_as_tail(M, N, BM, BN, sms):
    t = _cdiv(M, BM) * _cdiv(N, BN)
    return t, t // sms, (sms - t % sms) % sms


def _float_waves(M, N, BM, BN, sms):
    t = _cdiv(M, BM) * _cdiv(N, BN)
    return t, t / sms, t % sms


WAVE_MISTAKES = [
    (_floor_tiles, "the tile count floors M / BLOCK_M and N / BLOCK_N: a partial tile at the edge still needs a "
                   "program, so it is ceil(M / BLOCK_M) x ceil(N / BLOCK_N) (triton.cdiv)"),
    (_last_wave_full, "the part-empty last wave is counted as a whole wave: 'whole waves' is tiles // sms; the "
                      "last wave's tiles are the remainder, tiles % sms"),
    (_idle_as_tail, "the third number is the idle SMs of the last wave (sms - tiles % sms); it is the tiles the "
                    "last wave holds, tiles % sms"),
    (_float_waves, "whole waves came out as a fraction (tiles / sms): use integer division, tiles // sms"),
]


def _plan(M, N, K, BM, BN, BK, sms, k_cap=True, cap=8, whole_last=False, ceil=False,
          no_split_whole=False, k_floor=False, full_split=1, above=1, unsplit=1):
    """The course's split plan with one change: ``cap`` (None: no cap), ``full_split`` (the split returned when the
    last wave is full), ``above`` (the split is used when it is above this), ``unsplit`` (the split returned when it
    is not used), or one of the flags."""
    t = _cdiv(M, BM) * _cdiv(N, BN)
    full, tail = t // sms, t % sms
    if tail == 0:
        return t, full_split
    split = _cdiv(sms, tail) if ceil else sms // tail
    if k_cap:
        split = min(split, K // BK if k_floor else _cdiv(K, BK))
    if cap:
        split = min(split, cap)
    if split > above:
        return (t if whole_last else full * sms), split
    return (full * sms if no_split_whole else t), unsplit


SPLIT_MISTAKES = [
    (lambda *a: _plan(*a, k_cap=False), "the split is not capped by the K tiles: a tile with ceil(K / BLOCK_K) "
                                        "K steps cannot be cut into more slices than that; take the minimum"),
    (lambda *a: _plan(*a, cap=None), "the split has no cap of 8: the course caps it at 8 slices (each slice adds "
                                      "an fp32 partial tile to write, read back and sum)"),
    (lambda *a: _plan(*a, whole_last=True), "'whole' counts the last wave's tiles too: with a split, only the tiles "
                                            "of the whole waves are computed whole, full_waves x sms"),
    (lambda *a: _plan(*a, ceil=True), "the split rounds sms / tail up: its slices would need more programs than "
                                      "there are SMs; round down (sms // tail)"),
    (lambda *a: _plan(*a, no_split_whole=True), "with no split (split 1) every tile is computed whole, the last "
                                                "wave's tail too: return (tiles, 1), not (full_waves x sms, 1)"),
    (lambda *a: _plan(*a, k_floor=True), "the K tiles are floored: a K tail still is a K step, ceil(K / BLOCK_K)"),
]




def _split_changes(gave, right):
    """A one-constant change to the course's split plan that gives what the learner's gave on every shape (``gave``:
    {shape: result}), in words; None when none does. Each is said from the shapes that show it."""
    fits = lambda **change: all(tuple(_plan(*c, **change)) == g for c, g in gave.items())
    caps = [cap for cap in range(2, 65) if cap != 8 and fits(cap=cap)]
    if caps:
        shown = max(g[1] for g in gave.values())
        return (f"the split is capped at {caps[0] if len(caps) == 1 else f'{caps[0]} or more'} K slices in place of "
                f"8 (your split_plan gives up to {shown}): the course caps it at 8, each slice adding an fp32 partial "
                "tile to write, read back and sum")
    for s in [0] + list(range(2, 65)):
        if fits(full_split=s):
            return (f"when the last wave is full (tiles % sms == 0) there is no tail to split: return (tiles, 1), "
                    f"not (tiles, {s})")
    for s in [0] + list(range(2, 65)):
        if fits(unsplit=s):
            return (f"where the split comes out at 1 (sms // tail is 1, or K has a single step) nothing is split: "
                    f"return (tiles, 1), not (tiles, {s})")
    if any(fits(above=t) for t in range(2, 65)):
        refused = sorted({right(*c)[1] for c, g in gave.items() if g[1] == 1 and right(*c)[1] > 1})
        return (f"the tail is left unsplit where the split comes out at {', '.join(map(str, refused))}: any split "
                "above 1 is used (split > 1), each slice of a tail tile going to an otherwise idle SM")
    return None


_RETURNS = {"waves": "(tiles, whole waves, tiles in the last wave)", "split_plan": "(tiles computed whole, K slices)"}
ARGS = {"waves": ("M", "N", "BLOCK_M", "BLOCK_N", "sms"), "split_plan": ("M", "N", "K", "BLOCK_M", "BLOCK_N", "BLOCK_K", "sms")}


def _compare(name, fn, cases, right, mistakes):
    wrong, gave = [], {}
    for case in cases:
        try:
            got = fn(*case)
        except ZeroDivisionError:
            raise AssertionError(f"{name}{case} divided by zero: when the last wave is full (tiles % sms == 0) "
                                 "there is nothing to split; return (tiles, 1) before dividing by the tail") from None
        if got is None:
            raise NotImplementedError(f"{name} returns None")
        gave[case] = tuple(got)
        if tuple(got) != right(*case):
            wrong.append((case, tuple(got)))
    if not wrong:
        return f"{len(cases)} shapes agree with the course's {name}, edges included"
    case, got = wrong[0]
    # a diagnosis must give what the learner's gives on every shape, the ones it got right included
    for mistake, why in mistakes:
        if all(tuple(mistake(*c)) == g for c, g in gave.items()):
            raise AssertionError(f"{why} (e.g. {name}{case} gave {got}, the course's gives {right(*case)})")
    why = _split_changes(gave, right) if name == "split_plan" else None
    if why:
        raise AssertionError(f"{why} (e.g. {name}{case} gave {got}, the course's gives {right(*case)})")
    if all(sorted(g) == sorted(right(*c)) for c, g in gave.items()):
        raise AssertionError(f"the right numbers in another order: {name} returns {_RETURNS[name]} (e.g. {name}{case} "
                             f"gave {got}, the course's gives {right(*case)})")
    for confuse, words in lab_check.confusions(ARGS[name]):
        try:
            same = all(tuple(right(*confuse(c))) == g for c, g in gave.items())
        except ZeroDivisionError:
            same = False
        if same:
            # which number goes wrong first: the tile count, from which waves derives the other two
            first = " (the tile count already differs)" if name == "waves" and any(
                g[0] != right(*c)[0] for c, g in gave.items()) else ""
            raise AssertionError(f"your {name} gives on every shape what the course's gives with {words}{first}: "
                                 f"check where you use them (e.g. {name}{case} gave {got}, the course's gives "
                                 f"{right(*case)})")
    raise AssertionError(f"{len(wrong)} of {len(cases)} shapes differ; e.g. {name}{case} gave {got}, "
                         f"the course's gives {right(*case)}")


def wave_units(M, N, BM, BN, sms=SMS):
    """The time of a tiling in units of one 128x128 tile's work: waves started (a part-empty one costs as much
    as a full one) times the work of one tile."""
    tiles, full, tail = gemm.waves(M, N, BM, BN, sms)
    return (full + (1 if tail else 0)) * BM * BN / (128 * 128)


def _tile(answer):
    """A tile answer in the course's spelling: "128x128" from "128X128", "128 x 128", "(128, 128)" or (128, 128)."""
    sizes = [int(v) for v in answer] if isinstance(answer, (tuple, list)) else re.findall(r"\d+", str(answer))
    if len(sizes) != 2:
        raise AssertionError(f"{answer!r} is not a tile: answer \"128x128\" or \"128x256\" (BLOCK_M x BLOCK_N)")
    return f"{int(sizes[0])}x{int(sizes[1])}"


def _prediction(faster):
    faster = _tile(faster() if callable(faster) else faster)
    a, b = wave_units(3072, 3072, 128, 128), wave_units(3072, 3072, 128, 256)
    right = "128x128" if a < b else "128x256"
    why = (f"counted in waves, 128x128 takes {a:.0f} waves of one unit and 128x256 {b / 2:.0f} waves of two units "
           f"= {b:.0f}: the larger tile's last wave is mostly idle and costs as much as a full one")
    if faster != right:
        raise AssertionError(f"not what the waves say: {why}; the extra flops per byte of 128x256 do not win back "
                             "a wave")
    return why


def check(waves, split_plan, faster):
    """``waves(M, N, BLOCK_M, BLOCK_N, sms)`` -> (tiles, whole waves, tiles in the last wave);
    ``split_plan(M, N, K, BLOCK_M, BLOCK_N, BLOCK_K, sms)`` -> (tiles computed whole, K slices per last-wave tile);
    ``faster()`` (or a string): "128x128" or "128x256", the persistent tile predicted faster at 3072^3 on 132 SMs."""
    return lab_check.run("exercise 07", [
        ("waves: tiles, whole waves, last wave", lambda: _compare("waves", waves, WAVE_CASES, gemm.waves, WAVE_MISTAKES)),
        ("split_plan: whole tiles and K slices",
         lambda: _compare("split_plan", split_plan, SPLIT_CASES, gemm.split_plan, SPLIT_MISTAKES)),
        ("the prediction at 3072^3", lambda: _prediction(faster))])
