"""The compile-only helper process behind ``aot.compile_sm90`` in CPU mode.

Reads one JSON request a line on stdin, compiles for sm_90 with stand-in arguments that
specialise exactly as the described ones would (dtype, 16-byte alignment, integer values,
descriptor shapes), and answers one JSON line on stdout."""
import base64
import importlib
import importlib.util
import json
import os
import sys
import tempfile
import traceback


def stand_in(spec):
    import torch
    from triton.tools.tensor_descriptor import TensorDescriptor
    if spec["kind"] == "tensor":
        t = torch.empty(4, dtype=getattr(torch, spec["dtype"]))  # CPU allocations are 64-byte aligned
        return t if spec["aligned"] else t[1:]
    if spec["kind"] == "desc":
        base = torch.empty(4, dtype=getattr(torch, spec["dtype"]))
        return TensorDescriptor(base, spec["shape"], spec["strides"], spec["block_shape"], spec["padding"])
    return spec["v"]


def load_kernel(req):
    if "module" in req:
        return getattr(importlib.import_module(req["module"]), req["name"])
    path = os.path.join(tempfile.mkdtemp(prefix="course_aot_"), "notebook_kernel.py")
    with open(path, "w") as f:
        f.write(req["source"])
    spec = importlib.util.spec_from_file_location("notebook_kernel", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return getattr(mod, req["name"])


def main():
    out = sys.stdout
    sys.stdout = sys.stderr  # anything Triton prints must not corrupt the reply stream
    from kernels.lab.aot import SM90, compile_here, short_error
    for line in sys.stdin:
        req = json.loads(line)
        try:
            ck = compile_here(load_kernel(req), [stand_in(a) for a in req["args"]], req["meta"],
                              tuple(req.get("target", SM90)))
            reply = {"ptx": ck.asm["ptx"], "cubin": base64.b64encode(ck.asm["cubin"]).decode(),
                     "shared": ck.metadata.shared, "num_warps": ck.metadata.num_warps,
                     "num_stages": ck.metadata.num_stages}
        except Exception as e:  # reported to the caller, who raises it with the kernel's name
            reply = {"error": short_error(e), "trace": traceback.format_exc()[-2000:]}
        out.write(json.dumps(reply) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
