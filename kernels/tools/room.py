"""A workshop room's load on one GPU server, measured through the real hub (workshop/jupyterhub_config.py).

    sudo python -m kernels.tools.room --participants 8 --out room.json     # on the GPU server, as root

What an instructor sizing a room needs to know, measured in one run, on the GPU the room uses:
  1. the instructor's live figures alone: lesson 03's TMA copy, lesson 04's persistent GEMM and cuBLAS (the
     lessons' ncu targets, ``kernels.lessons.profiled``), ``do_bench`` medians, timed over and over in a process of their own
     on the room's GPU all through the run, as the projector's JupyterLab would be;
  2. the dry run: one participant runs the session's notebooks alone, top to bottom (each in a new kernel, as a
     participant opens it); the Triton cache it leaves becomes the room's seed, as the guide's morning-of says;
  3. the room: N participants log in (each a Unix user of their own), and all run the same notebooks at once,
     each starting at a different one, for ``--seconds``; meanwhile the live figures go on;
  4. memory, sampled while the room runs: each participant's server and kernels (resident, host) and each CUDA
     context (GPU memory per process, from NVML);
  5. the live figures alone again; every server stopped, the hub stopped.
The participants' notebooks run in recorded mode (COURSE_ROOM_RECORDED=1): kernels and checks run on the GPU,
timings are read back. The report says how much slower the live figures and the notebooks were in the room.

The hub client here (``login``, ``execute``) is also the room test's (tests/test_hub.py)."""
import argparse
import asyncio
import datetime
import json
import os
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "workshop" / "jupyterhub_config.py"
# the 3-hour session's notebooks a participant runs (workshop/README.md, section 3), lesson 05 aside (TileLang)
DRY_RUN = "load-dryrun"
SESSION = ["notebooks/00_memory_wall.ipynb", "solutions/00_memory_wall.ipynb", "notebooks/01_naive_loads.ipynb",
           "notebooks/03_tma_descriptors.ipynb", "notebooks/02_cp_async.ipynb", "notebooks/04_pipelining.ipynb"]


# ---- the hub's client: what a participant's browser does ---------------------------------------------------------

def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def login(url, name, password, own):
    """Log ``name`` in through the form, as a browser does (the room's password, their own), and return the
    headers of an API token bound to that login. Raises PermissionError when the hub refuses."""
    import requests
    s = requests.Session()
    s.get(f"{url}/hub/login").raise_for_status()
    r = s.post(f"{url}/hub/login", data={"username": name, "password": password, "otp": own,
                                         "_xsrf": s.cookies["_xsrf"]}, allow_redirects=False)
    if r.status_code != 302 or not any(k.startswith("jupyterhub-hub-login") for k in s.cookies.keys()):
        raise PermissionError(f"{name}: login refused ({r.status_code}): {r.text[:300]}")
    r = s.post(f"{url}/hub/api/users/{name}/tokens", json={"note": "room", "expires_in": 3600},
               headers={"X-XSRFToken": s.cookies["_xsrf"]})
    r.raise_for_status()
    return {"Authorization": f"token {r.json()['token']}"}


async def execute(ws_url, auth, code, timeout=90):
    """Run ``code`` in a kernel through its websocket channel, as JupyterLab does: (its stdout, its errors)."""
    from tornado.httpclient import HTTPRequest
    from tornado.websocket import websocket_connect
    # tornado's default 20 s: a busy machine once took longer to put the websocket through to a starting kernel
    ws = await websocket_connect(HTTPRequest(ws_url, headers=auth, connect_timeout=timeout, request_timeout=timeout))
    msg_id = uuid.uuid4().hex
    ws.write_message(json.dumps({
        "header": {"msg_id": msg_id, "msg_type": "execute_request", "username": "room", "session": uuid.uuid4().hex,
                   "version": "5.3", "date": ""},
        "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
        "content": {"code": code, "silent": False, "store_history": False, "user_expressions": {},
                    "allow_stdin": False, "stop_on_error": True}}))
    out, errors, replied, idle = [], [], False, False
    end = time.monotonic() + timeout
    try:
        while not (replied and idle):
            raw = await asyncio.wait_for(ws.read_message(), max(end - time.monotonic(), 0.1))
            if raw is None:
                raise ConnectionError("the kernel's websocket closed")
            msg = json.loads(raw)
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                out.append(content["text"])
            elif kind == "error":
                errors.append(f"{content['ename']}: {content['evalue']}")
            elif kind == "execute_reply":
                replied = True
            elif kind == "status" and content["execution_state"] == "idle":
                idle = True
    finally:
        ws.close()
    return "".join(out), errors


# ---- the instructor's live figures --------------------------------------------------------------------------------

LIVE = ("copy_tma", "matmul_tma_persistent", "cublas")  # the instructor's live figures: lesson 03's copy, lesson 04's GEMM


def live(until, out):
    """Time the profile targets in turn (do_bench medians) until the file ``until`` exists; one JSON line each
    to ``out``: the wall-clock time, the target, the milliseconds."""
    from ..lab import bench
    from ..lessons import profiled
    chosen = [t for t in profiled.TARGETS if t.name in LIVE]
    launches = {t.name: fn for t, fn in profiled.checked_launches(chosen).items()}
    with open(out, "a") as sink:
        while not Path(until).exists():
            for name, fn in launches.items():
                ms = bench.median_ms(fn)  # do_bench's median, through the course's gate (never under COURSE_RECORDED)
                sink.write(json.dumps({"t": time.time(), "name": name, "ms": ms}) + "\n")
                sink.flush()


def live_command(until, out):
    return [sys.executable, "-m", "kernels.tools.room", "--live", str(until), str(out)]


def live_medians(path, start, end):
    """Per target, the median of the live medians timed wholly inside [start, end], with their 90th percentile and
    largest (how far one figure shown on the projector could stray)."""
    seen = {}
    for line in Path(path).read_text().splitlines():
        r = json.loads(line)
        if start <= r["t"] <= end:
            seen.setdefault(r["name"], []).append(r["ms"])
    p90 = lambda v: statistics.quantiles(v, n=10, method="inclusive")[-1] if len(v) > 1 else v[0]
    return {name: {"ms": statistics.median(v), "p90": p90(v), "max": max(v), "n": len(v)} for name, v in seen.items()}


# ---- memory -------------------------------------------------------------------------------------------------------

def sample_memory(peaks):
    """Fold into ``peaks`` (pid -> {kind, host, gpu}) the resident host memory of each participant's server and
    kernels (MiB; processes of the Unix users ``jupyter-*``) and the GPU memory each holds (MiB, NVML's figure per
    process), keeping each process's largest."""
    import psutil
    gpu = {}
    try:
        import pynvml
        pynvml.nvmlInit()
        for i in range(pynvml.nvmlDeviceGetCount()):
            for p in pynvml.nvmlDeviceGetComputeRunningProcesses(pynvml.nvmlDeviceGetHandleByIndex(i)):
                gpu[p.pid] = (p.usedGpuMemory or 0) / 2**20
    except Exception:  # no NVML here: host memory only
        pass
    for p in psutil.process_iter(["username", "cmdline", "memory_info"]):
        user, cmd = p.info["username"] or "", " ".join(p.info["cmdline"] or [])
        kind = "server" if "jupyterhub.singleuser" in cmd else "kernel" if "ipykernel" in cmd else None
        if not user.startswith("jupyter-") or not kind or not p.info["memory_info"]:
            continue
        seen = peaks.setdefault(p.pid, {"kind": kind, "host": 0.0, "gpu": 0.0})
        seen["host"] = max(seen["host"], p.info["memory_info"].rss / 2**20)
        seen["gpu"] = max(seen["gpu"], gpu.get(p.pid, 0.0))
    return peaks


def control_groups():
    """The control group of each participant's server (from /proc/PID/cgroup): where COURSE_ROOM_MEMORY limits it."""
    import psutil
    groups = {}
    for p in psutil.process_iter(["username", "cmdline"]):
        if (p.info["username"] or "").startswith("jupyter-") and "jupyterhub.singleuser" in " ".join(p.info["cmdline"] or []):
            try:
                groups[p.info["username"]] = Path(f"/proc/{p.pid}/cgroup").read_text().strip().splitlines()
            except OSError:
                pass
    return groups


def memory_summary(peaks):
    """Per kind of process, the peaks of every process seen (MiB): servers' and kernels' host memory, and the GPU
    memory of the kernels that held a CUDA context."""
    v = list(peaks.values())
    return {"servers": [round(p["host"]) for p in v if p["kind"] == "server"],
            "kernels": [round(p["host"]) for p in v if p["kind"] == "kernel"],
            "contexts": [round(p["gpu"]) for p in v if p["kind"] == "kernel" and p["gpu"]]}


# ---- the room -----------------------------------------------------------------------------------------------------

class Room:
    """The hub, started from the workshop config in a state folder of its own, and its participants."""

    def __init__(self, state, env, log):
        self.state, self.env, self.log = state, env, log
        self.port, hub_port, api = free_ports(3)
        self.url = f"http://127.0.0.1:{self.port}"
        self.password = env["COURSE_ROOM_PASSWORD"]
        self.auth = {}
        with open(log, "a") as sink:
            self.hub = subprocess.Popen(
                [sys.executable, "-m", "jupyterhub", "-f", str(CONFIG), "--ip", "127.0.0.1", "--port", str(self.port),
                 "--JupyterHub.hub_ip=127.0.0.1", f"--JupyterHub.hub_port={hub_port}",
                 f"--ConfigurableHTTPProxy.api_url=http://127.0.0.1:{api}"],
                cwd=state, env=env, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
        self.wait("the hub", self._up, 90)

    def _up(self):
        import requests
        try:
            return requests.get(f"{self.url}/hub/api", timeout=2).ok
        except requests.ConnectionError:
            return False

    def wait(self, what, check, timeout):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.hub.poll() is not None:
                raise RuntimeError(f"the hub exited ({self.hub.returncode}) waiting for {what}:\n"
                                   f"{Path(self.log).read_text()[-3000:]}")
            if check():
                return
            time.sleep(0.5)
        raise TimeoutError(f"timed out waiting for {what}:\n{Path(self.log).read_text()[-3000:]}")

    def enter(self, names):
        """Log ``names`` in and start their servers, all at once; wait until every one is ready."""
        import requests
        from concurrent.futures import ThreadPoolExecutor
        with ThreadPoolExecutor(len(names)) as pool:
            for name, auth in zip(names, pool.map(lambda n: login(self.url, n, self.password, f"own-{n}"), names)):
                self.auth[name] = auth
            for name, r in zip(names, pool.map(lambda n: requests.post(
                    f"{self.url}/hub/api/users/{n}/server", headers=self.auth[n]), names)):
                if r.status_code not in (201, 202):
                    raise RuntimeError(f"{name}'s server did not start: {r.status_code} {r.text[:300]}")
        for name in names:
            self.wait(f"{name}'s server", lambda: requests.get(f"{self.url}/hub/api/users/{name}", headers=self.auth[name])
                      .json()["servers"].get("", {}).get("ready"), 180)

    def leave(self, names):
        import requests
        for name in names:
            requests.delete(f"{self.url}/hub/api/users/{name}/server", headers=self.auth[name])

    async def notebook(self, name, path, deadline):
        """Run the code cells of ``path`` (relative to the course, as in the participant's home) in a new kernel of
        ``name``'s, in order, stopping at the first error or at ``deadline``: what ran, and how long it took."""
        import requests
        import nbformat
        cells = [c.source for c in nbformat.read(ROOT / path, as_version=4).cells if c.cell_type == "code"]
        api = f"{self.url}/user/{name}/api/kernels"
        start = time.monotonic()
        r = await asyncio.to_thread(requests.post, api, json={"name": "python3"}, headers=self.auth[name])
        r.raise_for_status()
        kernel = r.json()["id"]
        channel = f"ws://127.0.0.1:{self.port}/user/{name}/api/kernels/{kernel}/channels"
        folder = str(Path(path).parent)
        done = {"participant": name, "notebook": path, "cells": len(cells), "ran": 0, "error": None}
        try:
            out, _ = await execute(channel, self.auth[name], f"import os; os.chdir(os.path.expanduser('~/{folder}'))\n"
                                   "from kernels.lab.mode import MODE; print(MODE)", 120)
            done["mode"] = out.strip()  # hopper, gpu or cpu: where the participant's kernels ran
            for source in cells:
                left = deadline - time.monotonic()
                if left <= 0:
                    done["error"] = "stopped at the room's deadline"
                    break
                _, errors = await execute(channel, self.auth[name], source, left)
                if errors:
                    done["error"] = errors[0][:300]
                    break
                done["ran"] += 1
        except (asyncio.TimeoutError, ConnectionError) as e:
            late = time.monotonic() >= deadline - 1
            done["error"] = "stopped at the room's deadline" if late else f"stopped: {e!r}"[:300]
        done["seconds"] = round(time.monotonic() - start, 1)
        await asyncio.to_thread(requests.delete, f"{api}/{kernel}", headers=self.auth[name])
        return done

    async def session(self, name, notebooks, deadline, first=0):
        """``name`` runs ``notebooks`` from the ``first`` on, round and round, until ``deadline``."""
        ran, i = [], first
        while time.monotonic() < deadline:
            ran.append(await self.notebook(name, notebooks[i % len(notebooks)], deadline))
            i += 1
        return ran

    def stop(self):
        import psutil
        started = []
        if self.hub.poll() is None:
            started = psutil.Process(self.hub.pid).children(recursive=True)
            self.hub.send_signal(signal.SIGTERM)
            try:
                self.hub.wait(60)
            except subprocess.TimeoutExpired:
                self.hub.kill()
        for p in psutil.wait_procs(started, timeout=15)[1]:
            p.kill()


def _summary(report):
    lines = [f"{report['device']}, {report['date']}: {report['participants']} participants in recorded mode, "
             f"separated as Unix users: {report['separated']}, proxy: {report['proxy']}"]
    before, room, after = (report["live"][k] for k in ("alone_before", "room", "alone_after"))
    for name in before:
        if name in room:
            spread = f"; 90% under {room[name]['p90']:.3f} ms" if "p90" in room[name] else ""
            lines.append(f"  live {name:24s} alone {before[name]['ms']:8.3f} ms   in the room {room[name]['ms']:8.3f} ms "
                         f"({room[name]['ms'] / before[name]['ms'] - 1:+.1%}{spread})   alone after "
                         f"{after.get(name, {}).get('ms', float('nan')):8.3f} ms")
    alone = {r["notebook"]: r["seconds"] for r in report["alone"] if not r["error"]}
    for nb in report["notebooks"]:
        times = [r["seconds"] for r in report["room"] if r["notebook"] == nb and not r["error"]]
        if nb in alone and times:
            lines.append(f"  {nb:40s} alone {alone[nb]:6.1f} s   in the room: median {statistics.median(times):6.1f} s "
                         f"over {len(times)} runs")
    errors = [r for r in report["alone"] + report["room"] if r["error"] and "deadline" not in r["error"]]
    modes = sorted({r.get("mode") for r in report["alone"] + report["room"] if r.get("mode")})
    lines.append(f"  notebooks run: {sum(not r['error'] for r in report['room'])} whole in the room, "
                 f"{len(errors)} stopped by an error; the participants' kernels ran in mode {', '.join(modes)}")
    lines += [f"    {r['participant']} {r['notebook']}: {r['error']}" for r in errors[:8]]
    m = report["memory"]
    for key, label in (("servers", "server (host)"), ("kernels", "kernel (host)"), ("contexts", "CUDA context (GPU)")):
        if m[key]:
            lines.append(f"  {label:20s} median {statistics.median(m[key]):7.0f} MiB, max {max(m[key]):7.0f} MiB")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--participants", type=int, default=8)
    p.add_argument("--seconds", type=float, default=150, help="how long the room runs its notebooks")
    p.add_argument("--alone-seconds", type=float, default=150, help="the dry run's limit")
    p.add_argument("--live-seconds", type=float, default=20, help="the live figures alone, before and after")
    p.add_argument("--notebooks", nargs="+", default=SESSION)
    p.add_argument("--gpu", default="0", help="the GPU the room and the live figures share")
    p.add_argument("--memory", help="COURSE_ROOM_MEMORY for the room (e.g. 8G)")
    p.add_argument("--out", default="room.json")
    p.add_argument("--live", nargs=2, metavar=("UNTIL", "OUT"), help=argparse.SUPPRESS)  # the live child
    args = p.parse_args(argv)
    if args.live:
        return live(*args.live)
    from ..lab.mode import MODE
    if MODE == "cpu":
        sys.exit("the room's load is measured on a GPU server: this machine has no CUDA GPU")
    if os.geteuid() != 0:
        print("[room] not root: the hub cannot separate participants; every server runs as this user", file=sys.stderr)

    state = Path(tempfile.mkdtemp(prefix="room-"))
    state.chmod(0o711)
    log, marks = state / "hub.log", state / "live.jsonl"
    stop_live = state / "stop-live"
    env = {**os.environ, "COURSE_ROOM_PASSWORD": secrets.token_hex(8), "COURSE_ROOM_RECORDED": "1",
           "COURSE_ROOM_GPUS": args.gpu}
    if args.memory:
        env["COURSE_ROOM_MEMORY"] = args.memory
    if not shutil.which("configurable-http-proxy") or os.environ.get("COURSE_ROOM_PROXY") == "python":
        env["COURSE_ROOM_PROXY"] = "python"
    live_proc = subprocess.Popen(live_command(stop_live, marks), cwd=ROOT,
                                 env={**os.environ, "CUDA_VISIBLE_DEVICES": args.gpu})
    report = {"device": None, "date": datetime.date.today().isoformat(), "participants": args.participants,
              "notebooks": args.notebooks, "separated": os.geteuid() == 0,
              "proxy": "npm" if env.get("COURSE_ROOM_PROXY") != "python" else "python", "memory_limit": args.memory,
              "alone": [], "room": [], "phases": {}}
    peaks = {}
    room, names = None, [DRY_RUN]
    try:
        import torch
        report["device"] = torch.cuda.get_device_name(int(args.gpu))
        while not marks.exists() or not marks.read_text().strip():  # compiled, checked, timing
            if live_proc.poll() is not None:
                sys.exit("the live figures' process ended before timing anything")
            time.sleep(1)
        t0 = time.time()
        time.sleep(args.live_seconds)
        report["phases"]["alone_before"] = (t0, time.time())

        room = Room(state, env, log)
        room.enter([DRY_RUN])
        deadline = time.monotonic() + args.alone_seconds
        t_dry = time.time()
        report["alone"] = [asyncio.run(room.notebook(DRY_RUN, nb, deadline)) for nb in args.notebooks]
        report["phases"]["dry_run"] = (t_dry, time.time())
        room.leave([DRY_RUN])
        seed = state / "home" / (f"jupyter-{DRY_RUN}" if os.geteuid() == 0 else DRY_RUN) / ".triton" / "cache"
        if seed.is_dir():  # the morning-of: the dry run's compiled kernels, a copy for each participant
            shutil.copytree(seed, state / "triton-seed")

        names += [f"load-{i:02d}" for i in range(1, args.participants + 1)]
        room.enter(names[1:])
        report["groups"] = control_groups()
        stop = threading.Event()

        def sampler():
            while not stop.wait(3):
                sample_memory(peaks)
        watcher = threading.Thread(target=sampler, daemon=True)
        watcher.start()
        t1 = time.time()
        deadline = time.monotonic() + args.seconds

        async def everyone():
            return await asyncio.gather(*(room.session(n, args.notebooks, deadline, first=i)
                                          for i, n in enumerate(names[1:])))
        report["room"] = [r for ran in asyncio.run(everyone()) for r in ran]
        report["phases"]["room"] = (t1, time.time())
        stop.set()
        room.leave(names[1:])
        time.sleep(5)
        t2 = time.time()
        time.sleep(args.live_seconds)
        report["phases"]["alone_after"] = (t2, time.time())
    finally:
        stop_live.touch()
        try:
            live_proc.wait(120)
        except subprocess.TimeoutExpired:
            live_proc.kill()
        if room:
            room.stop()
        if os.geteuid() == 0:  # the Unix users the room made for the run, and their homes
            for name in names:
                subprocess.run(["userdel", "--remove", f"jupyter-{name}"], capture_output=True)
    report["live"] = {k: live_medians(marks, *v) for k, v in report["phases"].items()}
    report["memory"] = memory_summary(peaks)
    Path(args.out).write_text(json.dumps(report, indent=1))
    print(_summary(report))
    print(f"-> {args.out} (hub log: {log})")


if __name__ == "__main__":
    main()
