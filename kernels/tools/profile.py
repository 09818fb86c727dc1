"""Record Nsight Compute's view of one kernel per lesson (``kernels.lessons.profiled``) into results/<device>.json.

    python -m kernels.tools.profile                  # every target, on a Hopper GPU with ncu on the PATH
    python -m kernels.tools.profile --lesson 06      # one lesson's
    python -m kernels.tools.profile --out FILE --raw TABLE.csv

The records go to each target's lesson under the run "ncu", each with its own date; the file's date stays that of
the lessons' last recording."""
import sys

from ..lab import ncu, results
from ..lab.errors import ArgumentError
from ..lessons import profiled


def main(argv):
    opts = dict(zip(argv[::2], argv[1::2]))
    from ..lab.mode import MODE
    if MODE == "cpu":
        sys.exit("profiling needs a CUDA GPU: in CPU mode the course reads results/, it never writes it")
    try:
        recs = profiled.profile(opts.get("--lesson"), raw=opts.get("--raw"))
    except (ncu.NcuError, ncu.ProfiledError, ArgumentError) as e:
        sys.exit(str(e))
    path = results.save(recs, opts.get("--out"), keep_date=True)
    for r in recs:
        n = r["ncu"]
        print(f"lesson {r['lesson']} {r['name']:24s} {r['ms'] * 1e3:8.1f} us  DRAM {n['dram_pct']:5.1f}%  "
              f"SM {n['sm_pct']:5.1f}%  tensor {n['tensor_pct']:5.1f}%  warps {n['warps_active_pct']:5.1f}%")
    print(f"-> {path}")


if __name__ == "__main__":
    main(sys.argv[1:])
