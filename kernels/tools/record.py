"""Run every lesson's measurements on this GPU and merge them into results/<device>.json.

    python -m kernels.tools.record                  # every run of every lesson
    python -m kernels.tools.record 00 01            # some lessons
    python -m kernels.tools.record 03:tiles 04      # one run of a lesson, and a whole lesson

A lesson's runs are its ``RUNS`` (``kernels.lessons``): the very functions its notebook calls live,
so what CPU mode shows is what a GPU would have shown."""
import datetime
import importlib
import sys

from ..lab import measure, results
from ..lab.mode import MODE, device_name
from ..lessons import LESSONS


def main(argv):
    """Runs named: each record carries its date and the file keeps its own (the lessons' recording); none named:
    every run, and the file takes today's date."""
    today = datetime.date.today().isoformat()
    if MODE == "cpu":
        sys.exit("recording needs a CUDA GPU: in CPU mode the course reads results/, it never writes it")
    for arg in argv or sorted(LESSONS):
        lesson, _, only = arg.partition(":")
        module = importlib.import_module(f"kernels.lessons.{LESSONS[lesson]}")
        for run, fn in module.RUNS.items():
            if only and run != only:
                continue
            if not measure.can_run(getattr(module, "NEEDS", "gpu")):
                print(f"lesson {lesson}: skipped, needs {module.NEEDS}")
                break
            records = [{**r, "date": today} if argv else r for r in measure.take(lesson, run, fn)]
            path = results.save(records, keep_date=bool(argv))
            print(f"lesson {lesson} {run}: {len(records)} records on {device_name()} -> {path}")
            for r in records:
                rate = f"{r['gbps']:8.1f} GB/s" if "gbps" in r else f"{r['tflops']:8.1f} TFLOP/s" if "tflops" in r else ""
                ms = f"{r['ms']:9.4f} ms" if r["ms"] is not None else "untimed     "
                print(f"  {r['name']:22s} {str(r['config']):64s} {ms} {rate}")


if __name__ == "__main__":
    main(sys.argv[1:])
