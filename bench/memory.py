#!/usr/bin/python3
"""Peak memory of ckptfix commands as users measure it (issue 25).

For a checkpoint of many records (default 1 GiB in 2048 fp32 tensors, and
the same size in 64 tensors), in each state the file can be in the page
cache, every command runs under a sampler that reads /proc/PID/status every
millisecond and reports:

  * peak RSS as the kernel counts it for the finished process (wait4's
    ru_maxrss: what /usr/bin/time and container limits see);
  * the peak RssAnon (the process's own memory) and RssFile (pages of files
    mapped into it) seen by the sampler.

Cache states:
  cold-read  the caches dropped (as root; else said so and skipped), then the
             file read once front to back (`cat`: as after a download or a cp)
  written    the file just written by torch.save (its pages in the cache as
             the writer left them)

Commands: inspect, verify, strip-prefix, cast --dtype bf16, convert to
safetensors, weights-only, salvage (of the file cut at 60 %), each with the GPU load test off (--gpu off);
with --gpu also with it on where a CUDA device is usable, so the CUDA
context's share is seen apart.

  /usr/bin/python3 bench/memory.py                     # 1 GiB, 2048 and 64 records
  /usr/bin/python3 bench/memory.py --size-mib 256 --records 64,2048 --baseline OLD/ckptfix
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

COMMANDS = {
    "inspect": lambda b, src, out: [b, "inspect", src],
    "verify": lambda b, src, out: [b, "verify", "--gpu", "off", src],
    "strip-prefix": lambda b, src, out: [b, "strip-prefix", "--gpu", "off", src, "-o", out + ".pt", "-f"],
    "cast": lambda b, src, out: [b, "cast", "--dtype", "bf16", "--gpu", "off", src, "-o", out + ".pt", "-f"],
    "to-safetensors": lambda b, src, out: [b, "convert", "--gpu", "off", src, "-o", out + ".safetensors", "-f"],
    "weights-only": lambda b, src, out: [b, "weights-only", "--gpu", "off", src, "-o", out + ".pt", "-f"],
    # The file cut at 60 % (issue 28): made from the generated one just before.
    "salvage": lambda b, src, out: [b, "salvage", "--gpu", "off", cut_copy(src), "-o", out + ".pt", "-f"],
}


def cut_copy(src):
    """SRC.cut60: the first 60 % of SRC (made when missing)."""
    cut = src + ".cut60"
    if not os.path.exists(cut) or os.path.getmtime(cut) < os.path.getmtime(src):
        with open(src, "rb") as f_in, open(cut, "wb") as f_out:
            shutil.copyfileobj(f_in, f_out)
            f_out.truncate(os.path.getsize(src) * 6 // 10)
    return cut


def generate(path, mib, records, python):
    """A DataParallel-style fp32 state dict of `mib` MiB in `records` tensors, written by torch."""
    script = (f"import collections, torch\n"
              f"per = ({mib} << 20) // {records} // 4\n"
              f"sd = collections.OrderedDict((f'module.layer{{i}}.weight', torch.rand(per)) for i in range({records}))\n"
              f"torch.save(sd, {path!r})\n")
    subprocess.run([python, "-c", script], check=True)


def drop_caches():
    """True when the page cache could be dropped (root)."""
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def read_once(path):
    with open(path, "rb") as f:
        while f.read(8 << 20):
            pass


def status_kib(pid):
    """(VmRSS, RssAnon, RssFile) in KiB from /proc/PID/status, or None once the process is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            fields = dict(line.split(":", 1) for line in f if ":" in line)
    except OSError:
        return None
    get = lambda k: int(fields.get(k, "0 kB").split()[0])
    return get("VmRSS"), get("RssAnon"), get("RssFile")


def measured(command):
    """(wall seconds, ru_maxrss MiB, peak RssAnon MiB, peak RssFile MiB) of one run."""
    # stderr into a file: a pipe read only after the child has exited would
    # stop a child that writes more than the pipe holds.
    with tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=err)
        anon = file = 0
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            s = status_kib(proc.pid)
            if s:
                anon, file = max(anon, s[1]), max(file, s[2])
            time.sleep(0.001)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            err.seek(0)
            raise SystemExit(f"failed ({proc.returncode}): {' '.join(command)}\n{err.read().decode()}")
    return wall, usage.ru_maxrss / 1024, anon / 1024, file / 1024


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ckptfix", default=os.path.join(REPO, "build", "ckptfix"))
    parser.add_argument("--baseline", default=None, help="another ckptfix binary, measured the same way")
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--records", default="2048,64")
    parser.add_argument("--commands", default=",".join(COMMANDS))
    parser.add_argument("--python", default=sys.executable, help="the interpreter whose torch writes the files")
    parser.add_argument("--workdir", default=None)
    args = parser.parse_args()
    binaries = {"ckptfix": args.ckptfix}
    if args.baseline:
        binaries["baseline"] = args.baseline
    workdir = args.workdir or tempfile.mkdtemp(prefix="ckptfix-memory-")
    os.makedirs(workdir, exist_ok=True)
    can_drop = drop_caches()
    print(f"# {os.uname().sysname} {os.uname().release}; {os.cpu_count()} cores; caches "
          + ("dropped before each cold-read run" if can_drop else "NOT dropped (not root): cold-read is warm-read"))
    print("| file | cache | command | binary | seconds | peak RSS MiB | peak RssAnon MiB | peak RssFile MiB |")
    print("|---|---|---|---|---|---|---|---|")
    try:
        for records in [int(r) for r in args.records.split(",")]:
            src = os.path.join(workdir, f"src-{records}.pt")
            label = f"{args.size_mib} MiB, {records} records"
            for state in ("cold-read", "written"):
                for name in args.commands.split(","):
                    for tag, binary in binaries.items():
                        if state == "written":
                            if os.path.exists(src):
                                os.remove(src)
                            generate(src, args.size_mib, records, args.python)
                        elif not os.path.exists(src):
                            generate(src, args.size_mib, records, args.python)
                        out = os.path.join(workdir, "out")
                        command = COMMANDS[name](binary, src, out)  # salvage: makes the cut copy
                        if state == "cold-read":
                            drop_caches()
                            read_once(command[-4] if name == "salvage" else src)
                        wall, rss, anon, file = measured(command)
                        print(f"| {label} | {state} | {name} | {tag} | {wall:.2f} | {rss:.0f} | {anon:.0f} | {file:.0f} |",
                              flush=True)
                        for ext in (".pt", ".safetensors"):
                            if os.path.exists(out + ext):
                                os.remove(out + ext)
    finally:
        if not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
