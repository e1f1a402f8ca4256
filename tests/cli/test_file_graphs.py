#!/usr/bin/python3
"""Inputs that name other files, named badly (issue 22).

Run:  /usr/bin/python3 tests/cli/test_file_graphs.py [--ckptfix PATH] [unittest args]

A shard index names its shards and a distributed checkpoint's .metadata its
.distcp files; a hostile set can make those names anything. Each case here is
a directory built by the test (tiny safetensors shards written by hand, the
committed 2-rank DCP fixture copied and altered): an index that names itself,
two indexes that name each other, a ".bin" shard whose content is an index,
a shard that is a link to its index, one file under two names (hard link),
a FIFO, a directory; a .distcp that is a link to .metadata, a FIFO, or a hard
link of another .distcp. On each, every reading and rewriting command must:

  * print exactly one golden error line naming the file, the entry (the
    tensor or chunk that names it) and the reason, and exit 1;
  * print nothing else on stdout (check: its violation line; inspect --json:
    its report), write no file anywhere, leave the inputs untouched;
  * finish within 20 s of CPU time and 256 MiB peak RSS (not asserted under
    sanitizers), and never block (a FIFO opened for reading waits for a
    writer forever: a run still going after 60 s is killed and fails).

Before issue 22, the index cases crashed every command with SIGSEGV (the
index reader opened what it named through the general opener, recursing
without end) and the FIFO cases hung. Nothing here needs torch.
"""

import json
import os
import shutil
import stat
import struct
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import cli_support as cs  # noqa: E402

TIME_LIMIT = 20.0
RSS_LIMIT = 256 << 20
WALL_LIMIT = 60.0
SANITIZED_WALL_LIMIT = 300.0
DCP_2RANK = os.path.join(cs.FIXTURES, 'torch2.14', 'dcp', 'dcp_2rank')

OUT = 'out.pt'
COMMANDS = [
    ('inspect', lambda f: ['inspect', f]),
    ('inspect --json', lambda f: ['inspect', '--json', f]),
    ('verify', lambda f: ['verify', '--gpu', 'off', f]),
    ('check', lambda f: ['check', f]),
    ('convert', lambda f: ['convert', f, '-o', OUT]),
    ('convert to safetensors', lambda f: ['convert', f, '-o', 'out.safetensors']),
    ('strip-prefix', lambda f: ['strip-prefix', '--auto', f, '-o', OUT]),
    ('add-prefix', lambda f: ['add-prefix', '--prefix', 'm.', f, '-o', OUT]),
    ('remap', lambda f: ['remap', '--to', 'cpu', f, '-o', OUT]),
    ('cast', lambda f: ['cast', '--dtype', 'fp16', f, '-o', OUT]),
    ('fix', lambda f: ['fix', '--auto-prefix', '--to', 'cpu', f, '-o', OUT]),
    ('weights-only', lambda f: ['weights-only', f, '-o', OUT]),
]


def safetensors_bytes(tensors):
    """A safetensors file of float32 tensors {name: [values]}, laid out as the library writes it."""
    header, data = {}, b''
    for name, values in tensors.items():
        raw = struct.pack(f'<{len(values)}f', *values)
        header[name] = {'dtype': 'F32', 'shape': [len(values)], 'data_offsets': [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header, separators=(',', ':')).encode()
    text += b' ' * ((8 - len(text) % 8) % 8)
    return struct.pack('<Q', len(text)) + text + data


def index_json(weight_map):
    return json.dumps({'metadata': {}, 'weight_map': weight_map})


def write(path, data):
    with open(path, 'w' if isinstance(data, str) else 'wb') as f:
        f.write(data)


def snapshot(root):
    """Every entry under root: a regular file's bytes' digest, a link's target, or its kind."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            p = os.path.join(dirpath, n)
            st = os.lstat(p)
            if stat.S_ISLNK(st.st_mode):
                out[p] = 'link to ' + os.readlink(p)
            elif stat.S_ISREG(st.st_mode):
                out[p] = cs.sha256(p)
            else:
                out[p] = stat.S_IFMT(st.st_mode)
    return out


# -- the cases: (name, builder(dir) -> the input to give, relative to the parent; expected error) ----

def index_names_itself(d):
    write(os.path.join(d, 'model.safetensors.index.json'), index_json({'w': 'model.safetensors.index.json'}))
    return 'model.safetensors.index.json'


def indexes_name_each_other(d):
    write(os.path.join(d, 'a.index.json'), index_json({'w': 'b.index.json'}))
    write(os.path.join(d, 'b.index.json'), index_json({'w': 'a.index.json'}))
    return 'a.index.json'


def bin_shard_is_an_index(d):
    write(os.path.join(d, 'pytorch_model.bin.index.json'), index_json({'w': 'pytorch_model.bin'}))
    write(os.path.join(d, 'pytorch_model.bin'), index_json({'w': 'pytorch_model.bin'}))
    return 'pytorch_model.bin.index.json'


def shard_links_to_its_index(d):
    write(os.path.join(d, 'model.safetensors.index.json'),
          index_json({'w': 'model-00001-of-00002.safetensors', 'v': 'model-00002-of-00002.safetensors'}))
    write(os.path.join(d, 'model-00001-of-00002.safetensors'), safetensors_bytes({'w': [1, 2]}))
    os.symlink('model.safetensors.index.json', os.path.join(d, 'model-00002-of-00002.safetensors'))
    return 'model.safetensors.index.json'


def one_shard_two_names(d):
    write(os.path.join(d, 'model.safetensors.index.json'),
          index_json({'w': 'model-00001-of-00002.safetensors', 'v': 'model-00002-of-00002.safetensors'}))
    write(os.path.join(d, 'model-00001-of-00002.safetensors'), safetensors_bytes({'w': [1, 2], 'v': [3]}))
    os.link(os.path.join(d, 'model-00001-of-00002.safetensors'), os.path.join(d, 'model-00002-of-00002.safetensors'))
    return 'model.safetensors.index.json'


def shard_is_a_fifo(d):
    write(os.path.join(d, 'model.safetensors.index.json'), index_json({'w': 'model.safetensors'}))
    os.mkfifo(os.path.join(d, 'model.safetensors'))
    return 'model.safetensors.index.json'


def shard_is_a_directory(d):
    write(os.path.join(d, 'model.safetensors.index.json'), index_json({'w': 'model.safetensors'}))
    os.mkdir(os.path.join(d, 'model.safetensors'))
    return 'model.safetensors.index.json'


def dcp_copy(d):
    ckpt = os.path.join(d, 'ckpt')
    shutil.copytree(DCP_2RANK, ckpt)
    os.remove(os.path.join(ckpt, '__1_0.distcp'))
    return ckpt


def distcp_links_to_metadata(d):
    os.symlink('.metadata', os.path.join(dcp_copy(d), '__1_0.distcp'))
    return 'ckpt'


def distcp_is_a_fifo(d):
    os.mkfifo(os.path.join(dcp_copy(d), '__1_0.distcp'))
    return 'ckpt'


def distcp_two_names(d):
    ckpt = dcp_copy(d)
    os.link(os.path.join(ckpt, '__0_0.distcp'), os.path.join(ckpt, '__1_0.distcp'))
    return 'ckpt'


CHUNK = "chunk at [2,0] of tensor 'model.shard0'"
CASES = {
    'index_names_itself': (index_names_itself, 'model.safetensors.index.json', "tensor 'w'",
                           "it names the shard 'model.safetensors.index.json', which is this file itself"),
    'indexes_name_each_other': (indexes_name_each_other, 'b.index.json', "tensor 'w'",
                                'a shard must be a file of tensors (torch.save or safetensors), but this is a shard '
                                "index, which names files of its own; a shard named by the index 'a.index.json'"),
    'bin_shard_is_an_index': (bin_shard_is_an_index, 'pytorch_model.bin', "tensor 'w'",
                              'a shard must be a file of tensors (torch.save or safetensors), but this is a shard '
                              "index, which names files of its own; a shard named by the index "
                              "'pytorch_model.bin.index.json'"),
    'shard_links_to_its_index': (shard_links_to_its_index, 'model.safetensors.index.json', "tensor 'v'",
                                 "it names the shard 'model-00002-of-00002.safetensors', which is this file itself"),
    'one_shard_two_names': (one_shard_two_names, 'model.safetensors.index.json', "tensor 'v'",
                            "it names the shard 'model-00002-of-00002.safetensors', which is the file it also names "
                            "as 'model-00001-of-00002.safetensors' (two names for one file: a link)"),
    'shard_is_a_fifo': (shard_is_a_fifo, 'model.safetensors', "tensor 'w'",
                        "not a regular file; the shard 'model.safetensors' named by 'model.safetensors.index.json'"),
    'shard_is_a_directory': (shard_is_a_directory, 'model.safetensors', "tensor 'w'",
                             "is a directory, not a checkpoint file; the shard 'model.safetensors' named by "
                             "'model.safetensors.index.json'"),
    'distcp_links_to_metadata': (distcp_links_to_metadata, 'ckpt/.metadata', CHUNK,
                                 "it names the data file '__1_0.distcp', which is this file itself"),
    'distcp_is_a_fifo': (distcp_is_a_fifo, 'ckpt/__1_0.distcp', CHUNK,
                         "not a regular file; the data file '__1_0.distcp' named by 'ckpt/.metadata'"),
    'distcp_two_names': (distcp_two_names, 'ckpt/.metadata', CHUNK,
                         "it names the data file '__1_0.distcp', which is the file it also names as "
                         "'__0_0.distcp' (two names for one file: a link)"),
}


class FileGraphTest(cs.CliTestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = cs.TempDir(prefix='ckptfix-file-graphs-')
        cls.sanitized = cs.sanitized()

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def check_case(self, name):
        build, file, place, message = CASES[name]
        for label, argv in COMMANDS:
            with self.subTest(case=name, command=label):
                cwd = self.tmp.join(f'{name}-{label.replace(" ", "-")}')
                os.makedirs(cwd)
                given = build(cwd)
                before = snapshot(cwd)
                timeout = SANITIZED_WALL_LIMIT if self.sanitized else WALL_LIMIT
                r = cs.run_measured(argv(given), cwd, guard=not self.sanitized, timeout=timeout)
                self.assertGreaterEqual(r.returncode, 0, 'killed by a signal (a crash, or blocked on a FIFO)' +
                                        r.describe())
                if not self.sanitized:
                    self.assertLess(r.cpu, TIME_LIMIT, r.describe())
                    self.assertLess(r.max_rss, RSS_LIMIT, r.describe())
                line = f"'{file}': {place}: {message}"
                if label == 'check':
                    # A violation of the gate, on stdout, naming the file of the input it is in (issue 65).
                    where = (f"'{file}' {place}" if place else f"'{file}'") if file != given else (place or 'structure')
                    self.assertEqual((r.returncode, r.stdout, r.stderr), (1, f'{given}: {where}: {message}\n', ''),
                                     r.describe())
                    self.assertEqual(snapshot(cwd), before, 'check changed or wrote files' + r.describe())
                    continue
                self.assertEqual((r.returncode, r.stderr), (1, f'ckptfix: error: {line}\n'), r.describe())
                if label == 'inspect --json':
                    entry = json.loads(r.stdout)['inputs'][0]
                    self.assertEqual((entry['status'], entry['error']), ('failed', line), r.describe())
                else:
                    self.assertEqual(r.stdout, '', r.describe())
                self.assertEqual(snapshot(cwd), before, 'a failed command changed or wrote files' + r.describe())


def _add_tests():
    for name in CASES:
        setattr(FileGraphTest, f'test_{name}', lambda self, n=name: self.check_case(n))


_add_tests()

if __name__ == '__main__':
    cs.main()
