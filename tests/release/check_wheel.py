#!/usr/bin/env python3
"""Checks a ckptfix wheel without installing it (any architecture):

    python3 tests/release/check_wheel.py WHEEL

  * RECORD lists exactly the wheel's entries, each with the urlsafe-base64
    sha256 of its bytes (no padding) and its size, and its own row empty
    (PEP 376, PEP 427);
  * the executable in .data/scripts/ has a regular-file mode with the x bit
    (pip makes an installed script executable only then);
  * WHEEL's Tag and METADATA's Name and Version match the file name.

Exit 0 when all hold; 1 with each problem on stderr.
"""
import base64
import csv
import hashlib
import io
import os
import stat
import sys
import zipfile


def problems(path):
    errors = []
    name, version, python, abi, platform = os.path.basename(path)[:-len(".whl")].split("-")
    with zipfile.ZipFile(path) as zf:
        bad = zf.testzip()
        if bad is not None:
            errors.append(f"{bad}: its CRC-32 does not match")
        names = [n for n in zf.namelist() if not n.endswith("/")]
        if len(names) != len(set(names)):
            errors.append("duplicate entries in the zip")
        dist_info = f"{name}-{version}.dist-info"
        record = dist_info + "/RECORD"
        if record not in names:
            return [f"no {record}"]
        rows = list(csv.reader(io.StringIO(zf.read(record).decode("utf-8"))))
        listed = [row[0] for row in rows]
        if sorted(listed) != sorted(names):
            errors.append(f"in the zip, not in RECORD: {sorted(set(names) - set(listed))}")
            errors.append(f"in RECORD, not in the zip: {sorted(set(listed) - set(names))}")
        for row in rows:
            if len(row) != 3:
                errors.append(f"RECORD row {row} does not have 3 fields")
                continue
            entry, digest, size = row
            if entry == record:
                if digest or size:
                    errors.append(f"RECORD's own row must be '{record},,'")
                continue
            if entry not in names:
                continue
            data = zf.read(entry)
            want = "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            if digest != want:
                errors.append(f"{entry}: RECORD says {digest}, its bytes are {want}")
            if size != str(len(data)):
                errors.append(f"{entry}: RECORD says size {size}, it is {len(data)}")
        scripts = [i for i in zf.infolist() if ".data/scripts/" in i.filename]
        for info in scripts:
            mode = info.external_attr >> 16
            if not (stat.S_ISREG(mode) and mode & 0o111):
                errors.append(f"{info.filename}: mode {mode:o} is not an executable regular file")
        if not scripts:
            errors.append("no .data/scripts/ entry")
        wheel = zf.read(dist_info + "/WHEEL").decode()
        if f"Tag: {python}-{abi}-{platform}" not in wheel.splitlines():
            errors.append(f"WHEEL has no 'Tag: {python}-{abi}-{platform}'")
        headers = zf.read(dist_info + "/METADATA").decode().split("\n\n", 1)[0].splitlines()
        for field, value in (("Name", name), ("Version", version)):
            if f"{field}: {value}" not in headers:
                errors.append(f"METADATA has no '{field}: {value}'")
    return errors


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    errors = problems(sys.argv[1])
    for e in errors:
        print("  " + e, file=sys.stderr)
    print(f"{os.path.basename(sys.argv[1])}: {'ok' if not errors else 'FAILED'}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
