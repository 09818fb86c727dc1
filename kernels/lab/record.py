"""Run every lesson's benchmarks on this GPU and merge them into results/<device>.json.

    python -m kernels.lab.record            # all lessons
    python -m kernels.lab.record 00 01      # some
"""
import importlib
import sys

from .. import MODE, device_name
from . import bench

LESSONS = {"00": "kernels.roofline", "01": "kernels.loads", "02": "kernels.cp_async",
           "03": "kernels.descriptors", "04": "kernels.pipeline", "05": "kernels.side_by_side"}


def main(argv):
    if MODE == "cpu":
        sys.exit("recording needs a CUDA GPU: in CPU mode the course reads results/, it never writes it")
    for lesson in argv or sorted(LESSONS):
        records = importlib.import_module(LESSONS[lesson]).benchmarks()
        path = bench.save(records)
        print(f"lesson {lesson}: {len(records)} records on {device_name()} -> {path}")
        for r in records:
            rate = f"{r['gbps']:8.1f} GB/s" if "gbps" in r else f"{r['tflops']:8.1f} TFLOP/s" if "tflops" in r else ""
            print(f"  {r['name']:14s} {str(r['config']):70s} {r['ms']:9.4f} ms {rate}")


if __name__ == "__main__":
    main(sys.argv[1:])
