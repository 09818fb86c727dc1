"""Lesson 01's (and lesson 00's) in-flight arithmetic against the saved runs it quotes."""
import re

from conftest import prose, saved_output

SMS = 132  # the H200 and H100 SXM the saved runs were made on


def test_four_kib_of_loads_a_sm_would_carry_several_times_the_one_element_copy():
    """Lesson 01 blamed the one-element copy's rate on 4 KiB of loads in flight being under Little's law's ten or so
    KiB per SM. That figure counts a copy's writes too (about 5.5 KiB of loads), and 4 KiB of loads would carry about
    3 TB/s of copy at the idle latency: several times the 846 GB/s measured. The lessons now say so and leave the
    cause open."""
    tbps, ns, per_sm = re.search(r"([\d.]+) TB/s x (\d+) ns = [\d.]+ MiB in flight across the chip, (\d+) KiB per SM",
                                 saved_output("00_memory_wall", "in_flight = ")).groups()
    assert round(float(tbps) * 1e12 * float(ns) * 1e-9 / SMS / 1024) == int(per_sm) == 11
    loads = float(tbps) * 1e12 * float(ns) * 1e-9 / SMS / 1024 / 2
    assert 5.2 < loads < 5.7, loads  # "about 5.5 KiB"
    elem = int(re.search(r"copy_elem\s+(\d+) GB/s", saved_output("01_naive_loads", "rates, where = lesson.copies()"))[1])
    carried = 4096 * SMS / (float(ns) * 1e-9) * 2 / 1e12  # TB/s of copy (read + write) 4 KiB of loads a SM allow
    assert round(carried) == 3 and carried * 1e3 > 3 * elem, (carried, elem)
    l00, l01 = prose("00_memory_wall"), prose("01_naive_loads")
    assert "about 5.5 KiB of loads per SM here" in l00
    assert f"about 3 TB/s of copy at the idle latency: several times what the one-element copy reaches ({elem} GB/s" \
        in l01
    assert "the course has not measured which" in l01 and "well under the ten or so kilobytes" not in l01
    assert "less than lesson 00's Little's law asks to cover HBM latency" not in l01
