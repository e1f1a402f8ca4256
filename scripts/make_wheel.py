#!/usr/bin/env python3
"""Build the ckptfix wheel: the ckptfix binary as a script, plus a small package.

    python3 scripts/make_wheel.py --binary PATH --version 0.1.0 \\
        --platform manylinux_2_31_x86_64 --out-dir DIR \\
        --package-dir python/ckptfix [--license FILE]... [--readme FILE] \\
        [--license-expression EXPR] [--strict]

Writes DIR/ckptfix-VERSION-py3-none-PLATFORM.whl (PEP 427/491), which pip
installs so that the binary lands on PATH (venv/bin/ckptfix) and the
importable package `ckptfix` in site-packages:

    ckptfix/...                          --package-dir's files (python/ckptfix)
    ckptfix-VERSION.data/scripts/ckptfix the binary, bytes unchanged, mode 0755
    ckptfix-VERSION.dist-info/METADATA   core metadata 2.1
    ckptfix-VERSION.dist-info/WHEEL
    ckptfix-VERSION.dist-info/licenses/  each --license FILE
    ckptfix-VERSION.dist-info/RECORD     sha256 and size of every other entry

The output is deterministic: the same inputs (and the same zlib) give the
same bytes. Entries are sorted with dist-info last and RECORD the very last,
every timestamp is SOURCE_DATE_EPOCH (default 315532800, 1980-01-01, the
earliest a zip can hold), and modes, compression level and zip headers are
fixed.

The binary is checked against what the platform tag promises (PEP 600): its
ELF machine must be the tag's (else an error); a RUNPATH/RPATH, a shared
library outside the manylinux set (libckptfix.so of a development build) or
a GLIBC symbol version newer than the tag's 2_N is a warning, or an error
with --strict, which release builds should pass (see CMake's CKPTFIX_RELEASE).

Standard library only; runs on Python 3.9 (Debian bullseye) and newer.
Exit status: 0 written, 1 the wheel could not be written, 2 bad usage or
unreadable inputs (one-line message on stderr).
"""
import argparse
import base64
import csv
import hashlib
import io
import os
import re
import stat
import struct
import sys
import tempfile
import time
import zipfile

NAME = "ckptfix"
SUMMARY = "Convert and repair PyTorch checkpoints without Python, never running pickle code"
GENERATOR = "ckptfix make_wheel.py"
DEFAULT_EPOCH = 315532800  # 1980-01-01T00:00:00Z, the earliest DOS date a zip can hold
COMPRESS_LEVEL = 9  # fixed so that the output does not depend on zlib's default

# pip (pip/_internal/utils/unpacking.py, zip_item_is_executable) sets the
# executable bit on an installed file only when the entry's mode is a regular
# file (S_ISREG) with some x bit: 0o755 alone, without S_IFREG, would install
# the binary as 0644. Hence the file type bits in both modes.
MODE_FILE = stat.S_IFREG | 0o644
MODE_EXECUTABLE = stat.S_IFREG | 0o755

PLATFORM_RE = re.compile(r"manylinux_2_(\d+)_(x86_64|aarch64)")
ELF_MACHINE = {"x86_64": 62, "aarch64": 183}  # e_machine: EM_X86_64, EM_AARCH64
# The libraries a manylinux wheel may take from the system (PEP 600 defers to
# auditwheel's policy; its X11/GL entries are left out: ckptfix needs none).
MANYLINUX_LIBS = {
    "libc.so.6", "libm.so.6", "libdl.so.2", "librt.so.1", "libpthread.so.0", "libutil.so.1",
    "libnsl.so.1", "libresolv.so.2", "libgcc_s.so.1", "libstdc++.so.6",
    "ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1",
}
# A PEP 440 version in its normalized form (what a wheel's file name and
# Version must carry): 1.2.3, 1.2.3rc1, 1.2.3.post1, 1.2.3.dev4, 1!2.0+local.
VERSION_RE = re.compile(
    r"(\d+!)?\d+(\.\d+)*((a|b|rc)\d+)?(\.post\d+)?(\.dev\d+)?(\+[a-z0-9]+(\.[a-z0-9]+)*)?")

class UsageError(Exception):
    """Bad arguments or unreadable inputs: reported in one line, exit 2."""


class Parser(argparse.ArgumentParser):
    def error(self, message):
        # argparse prints the whole usage first; one line is easier to read in CI logs.
        raise UsageError("{} (see --help)".format(message))


def parse_args(argv):
    p = Parser(prog="make_wheel.py",
               description="Build the ckptfix wheel (binary as a script, plus the ckptfix package).")
    p.add_argument("--binary", required=True, help="the ckptfix executable (ELF) to ship")
    p.add_argument("--version", required=True, help="the version, normalized PEP 440 (e.g. 0.1.0)")
    p.add_argument("--platform", required=True, help="platform tag, manylinux_2_N_x86_64 or manylinux_2_N_aarch64")
    p.add_argument("--out-dir", required=True, help="where to write the wheel (created if missing)")
    p.add_argument("--license", action="append", default=[], metavar="FILE",
                   help="a license file, copied to dist-info/licenses/ (repeatable)")
    p.add_argument("--license-expression", default="MIT",
                   help="the License field of METADATA (default: MIT)")
    p.add_argument("--readme", metavar="FILE", help="Markdown file for the long description")
    p.add_argument("--package-dir", metavar="DIR", required=True,
                   help="the ckptfix Python package's directory (python/ckptfix)")
    p.add_argument("--strict", action="store_true",
                   help="refuse a binary that breaks the platform tag's promise instead of warning")
    return p.parse_args(argv)


def read_bytes(path, what):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise UsageError("cannot read {} {}: {}".format(what, path, e.strerror or e))


def validate(args):
    if not PLATFORM_RE.fullmatch(args.platform):
        raise UsageError("--platform {!r} is not manylinux_2_N_x86_64 or manylinux_2_N_aarch64".format(args.platform))
    if not VERSION_RE.fullmatch(args.version):
        raise UsageError("--version {!r} is not a normalized PEP 440 version (e.g. 0.1.0, 0.2.0rc1)".format(args.version))
    if not os.path.isfile(args.binary):
        raise UsageError("--binary {}: no such file".format(args.binary))
    if not args.license_expression.strip() or "\n" in args.license_expression:
        raise UsageError("--license-expression must be one non-empty line")
    if not os.path.isdir(args.package_dir):
        raise UsageError("--package-dir {}: not a directory".format(args.package_dir))
    if not os.path.isfile(os.path.join(args.package_dir, "__init__.py")):
        raise UsageError("--package-dir {}: has no __init__.py".format(args.package_dir))
    names = [os.path.basename(f) for f in args.license]
    for name in names:
        if names.count(name) > 1:
            raise UsageError("two --license files are named {!r}; they would overwrite each other".format(name))


def elf_dynamic(data):
    """(e_machine, NEEDED names, RUNPATH/RPATH values, GLIBC_x.y versions) of a 64-bit
    little-endian ELF (x86_64 and aarch64 Linux are), read from its program headers
    and dynamic section the way the dynamic loader sees them. Raises ValueError."""
    if data[4] != 2 or data[5] != 1:
        raise ValueError("not a 64-bit little-endian ELF")
    (machine,) = struct.unpack_from("<H", data, 18)
    phoff, = struct.unpack_from("<Q", data, 32)
    phentsize, phnum = struct.unpack_from("<HH", data, 54)
    loads, dynamic = [], None
    for i in range(phnum):
        p_type, _flags, offset, vaddr, _paddr, filesz = struct.unpack_from("<IIQQQQ", data, phoff + i * phentsize)
        if p_type == 1:  # PT_LOAD
            loads.append((vaddr, filesz, offset))
        elif p_type == 2:  # PT_DYNAMIC
            dynamic = (offset, filesz)
    if dynamic is None:  # statically linked
        return machine, [], [], []

    def file_offset(addr):
        for vaddr, filesz, offset in loads:
            if vaddr <= addr < vaddr + filesz:
                return addr - vaddr + offset
        raise ValueError("address {:#x} is in no PT_LOAD segment".format(addr))

    tags = []
    for pos in range(dynamic[0], dynamic[0] + dynamic[1], 16):
        tag, val = struct.unpack_from("<qQ", data, pos)
        if tag == 0:  # DT_NULL
            break
        tags.append((tag, val))
    strtab = file_offset(dict(tags)[5])  # DT_STRTAB

    def string(off):
        start = strtab + off
        return data[start:data.index(b"\0", start)].decode("utf-8", "replace")

    needed = [string(v) for t, v in tags if t == 1]  # DT_NEEDED
    paths = [string(v) for t, v in tags if t in (15, 29)]  # DT_RPATH, DT_RUNPATH
    versions = []
    entries = dict(tags)
    if 0x6ffffffe in entries:  # DT_VERNEED: Elf64_Verneed records, each with Elf64_Vernaux entries
        pos = file_offset(entries[0x6ffffffe])
        for _ in range(entries.get(0x6fffffff, 0)):  # DT_VERNEEDNUM
            _version, count, _file, aux, next_need = struct.unpack_from("<HHIII", data, pos)
            apos = pos + aux
            for _ in range(count):
                _hash, _flags, _other, name, next_aux = struct.unpack_from("<IHHII", data, apos)
                versions.append(string(name))
                apos += next_aux
            pos += next_need
    return machine, needed, paths, versions


def binary_problems(data, platform):
    """Ways the binary breaks what the manylinux_2_N_ARCH tag promises (PEP 600)."""
    glibc_minor, arch = PLATFORM_RE.fullmatch(platform).groups()
    try:
        machine, needed, paths, versions = elf_dynamic(data)
    except (ValueError, struct.error, KeyError, IndexError) as e:
        raise UsageError("--binary: cannot read its ELF headers: {}".format(e))
    if machine != ELF_MACHINE[arch]:
        # Never right, whatever --strict says.
        names = {v: k for k, v in ELF_MACHINE.items()}
        raise UsageError("--binary is an ELF for {}, not {} (--platform {})".format(
            names.get(machine, "e_machine {}".format(machine)), arch, platform))
    problems = []
    for path in paths:
        dirs = path.split(":")
        if any(d and not d.startswith("$ORIGIN") for d in dirs):
            problems.append("its RUNPATH/RPATH {!r} names directories of the build machine".format(path))
        if "" in dirs:
            # CMake pads a build tree's RUNPATH with ':' for `cmake --install`
            # to rewrite; ld.so reads each empty entry as the working directory.
            problems.append("its RUNPATH/RPATH {!r} has empty entries, which make the loader look for "
                            "libc, libm, ... in the working directory".format(path))
    outside = sorted(set(needed) - MANYLINUX_LIBS)
    if outside:
        problems.append("it needs {}, which no manylinux system provides".format(", ".join(outside)))
    glibc = [tuple(int(x) for x in v[len("GLIBC_"):].split(".")) for v in versions
             if re.fullmatch(r"GLIBC_\d+(\.\d+)*", v)]
    newest = max(glibc, default=None)
    if newest is not None and newest > (2, int(glibc_minor)):
        problems.append("it needs GLIBC_{}, newer than the tag's glibc 2.{}".format(
            ".".join(map(str, newest)), glibc_minor))
    return problems


def source_date():
    """The timestamp of every entry: SOURCE_DATE_EPOCH, clamped to what a zip can hold."""
    raw = os.environ.get("SOURCE_DATE_EPOCH", "").strip()
    if not raw:
        epoch = DEFAULT_EPOCH
    else:
        try:
            epoch = int(raw)
        except ValueError:
            raise UsageError("SOURCE_DATE_EPOCH={!r} is not an integer".format(raw))
    # DOS dates run from 1980 to 2107 and have 2-second resolution (zipfile
    # truncates the odd second itself).
    epoch = min(max(epoch, DEFAULT_EPOCH), 4354819198)
    return time.gmtime(epoch)[:6]


def package_files(args):
    """(path in the wheel, bytes) of the importable package, sorted by path."""
    files = []
    root = os.path.abspath(args.package_dir)
    for dirpath, dirnames, filenames in os.walk(root):
        # Byte code is the installer's business (pip compiles on install and
        # records it); a stale copy from the source tree must not ship.
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        for name in filenames:
            if name.endswith((".pyc", ".pyo")):
                continue
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, root).replace(os.sep, "/")
            files.append(("ckptfix/" + rel, read_bytes(path, "package file")))
    return sorted(files)


def metadata(args, readme):
    """METADATA, core metadata 2.1 (an RFC 822-style header block, then the description)."""
    lines = [
        "Metadata-Version: 2.1",
        "Name: " + NAME,
        "Version: " + args.version,
        "Summary: " + SUMMARY,
        "License: " + args.license_expression,
        "Requires-Python: >=3.9",
        "Classifier: Environment :: Console",
        "Classifier: Operating System :: POSIX :: Linux",
        "Classifier: Programming Language :: C++",
        "Classifier: Programming Language :: Python :: 3",
        "Classifier: Topic :: Scientific/Engineering :: Artificial Intelligence",
    ]
    # The license files are in dist-info/licenses/ (PEP 639's layout) but not
    # named by License-File: that field is core metadata 2.4's, and under 2.1
    # strict parsers (packaging >= 24.2, pip's own) reject it. 2.4 would name
    # them, at the price of tools older than packaging 24.2 not reading it.
    if readme is not None:
        lines.append("Description-Content-Type: text/markdown")
    text = "\n".join(lines) + "\n"
    if readme is not None:
        # The body after the blank line is the description (PEP 566); keep
        # the README's own text, ending in exactly one newline.
        text += "\n" + readme.rstrip("\n") + "\n"
    return text.encode("utf-8")


def wheel_file(tag):
    return ("Wheel-Version: 1.0\n"
            "Generator: {}\n"
            "Root-Is-Purelib: false\n"  # platform-specific: the binary is an ELF
            "Tag: {}\n").format(GENERATOR, tag).encode("utf-8")


def record_hash(data):
    digest = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def record_file(entries, record_path):
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    for path, data, _mode in entries:
        writer.writerow([path, record_hash(data), len(data)])
    writer.writerow([record_path, "", ""])  # RECORD cannot hash itself
    return out.getvalue().encode("utf-8")


def zip_info(path, mode, date_time):
    info = zipfile.ZipInfo(path, date_time=date_time)
    info.compress_type = zipfile.ZIP_DEFLATED
    info.create_system = 3  # Unix, so that external_attr's high half is a st_mode (default is 0 on Windows)
    info.external_attr = mode << 16
    return info


def build(args):
    validate(args)
    binary = read_bytes(args.binary, "--binary")
    if not binary.startswith(b"\x7fELF"):
        raise UsageError("--binary {} is not an ELF executable".format(args.binary))
    problems = binary_problems(binary, args.platform)
    if problems and args.strict:
        raise UsageError("--binary {} does not fit --platform {}: {}".format(
            args.binary, args.platform, "; ".join(problems)))
    for problem in problems:
        print("make_wheel.py: warning: --binary {}: {} (--strict refuses this)".format(args.binary, problem),
              file=sys.stderr)
    readme = None
    if args.readme is not None:
        try:
            readme = read_bytes(args.readme, "--readme").decode("utf-8")
        except UnicodeDecodeError:
            raise UsageError("--readme {} is not UTF-8 text".format(args.readme))
    licenses = [(os.path.basename(f), read_bytes(f, "--license")) for f in args.license]
    date_time = source_date()

    tag = "py3-none-" + args.platform
    dist_info = "{}-{}.dist-info".format(NAME, args.version)
    data_dir = "{}-{}.data".format(NAME, args.version)

    # (path, bytes, mode) in the order written: the package, then the
    # scripts, then dist-info (sorted within each), RECORD last.
    entries = [(path, data, MODE_FILE) for path, data in package_files(args)]
    entries.append((data_dir + "/scripts/ckptfix", binary, MODE_EXECUTABLE))
    info_files = [(dist_info + "/licenses/" + name, data) for name, data in licenses]
    info_files.append((dist_info + "/METADATA", metadata(args, readme)))
    info_files.append((dist_info + "/WHEEL", wheel_file(tag)))
    entries += [(path, data, MODE_FILE) for path, data in sorted(info_files)]
    record_path = dist_info + "/RECORD"
    entries.append((record_path, record_file(entries, record_path), MODE_FILE))

    os.makedirs(args.out_dir, exist_ok=True)
    out = os.path.join(args.out_dir, "{}-{}-{}.whl".format(NAME, args.version, tag))
    # Written beside the target and renamed into place, so that a failed run
    # never leaves a truncated wheel under the final name.
    fd, tmp = tempfile.mkstemp(prefix=".make_wheel.", suffix=".tmp", dir=args.out_dir)
    try:
        with os.fdopen(fd, "wb") as f:
            with zipfile.ZipFile(f, "w") as zf:
                for path, data, mode in entries:
                    zf.writestr(zip_info(path, mode, date_time), data, compresslevel=COMPRESS_LEVEL)
        os.chmod(tmp, 0o644)  # mkstemp makes 0600
        os.replace(tmp, out)
    except BaseException:
        os.unlink(tmp)
        raise
    return out


def main(argv=None):
    try:
        out = build(parse_args(sys.argv[1:] if argv is None else argv))
    except UsageError as e:
        print("make_wheel.py: error: {}".format(e), file=sys.stderr)
        return 2
    except OSError as e:  # writing the output: out-dir not writable, disk full, ...
        print("make_wheel.py: error: {}: {}".format(e.filename or "writing the wheel", e.strerror or e),
              file=sys.stderr)
        return 1
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
