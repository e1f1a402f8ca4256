#!/usr/bin/python3
"""Self-test for torch_compare.py: prove the judge accepts equal files and fails on changes.

Run:  /usr/bin/python3 tests/interop/test_torch_compare.py
All checkpoints are written with real torch.save into a temporary directory.
"""

import argparse
import collections
import contextlib
import io
import os
import struct
import subprocess
import sys
import tempfile
import unittest

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import torch_compare as tc  # noqa: E402

SCRIPT = os.path.join(HERE, 'torch_compare.py')


def f32_from_bits(bits):
    """A float32 tensor element with exact bits (e.g. a NaN payload)."""
    return torch.tensor([bits], dtype=torch.int32).view(torch.float32)


@contextlib.contextmanager
def saved_location(tag):
    """Make torch.save tag every storage with `tag` (fakes e.g. a CUDA-saved file)."""
    original = torch.serialization.location_tag
    torch.serialization.location_tag = lambda storage: tag
    try:
        yield
    finally:
        torch.serialization.location_tag = original


def state_dict():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2))
    return model.state_dict()



def torch_keeps_empty_storages_shared():
    """torch 1.13 restores two empty tensors saved from one storage as
    sharing it; torch 2.6 and later load each with its own empty storage."""
    e = torch.empty(0)
    buf = io.BytesIO()
    torch.save({'a': e, 'b': e[:]}, buf)
    buf.seek(0)
    loaded = torch.load(buf)
    return tc.storage_id(loaded['a']) == tc.storage_id(loaded['b'])

class TorchCompareTest(unittest.TestCase):

    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.tmp = self._tmp.name
        self.counter = 0

    def tearDown(self):
        self._tmp.cleanup()

    # -- helpers -----------------------------------------------------------

    def save(self, obj, location=None):
        self.counter += 1
        path = os.path.join(self.tmp, f'ckpt{self.counter}.pt')
        if location is None:
            torch.save(obj, path)
        else:
            with saved_location(location):
                torch.save(obj, path)
        return path

    def diffs(self, expected, actual, options=None, exp_location=None, act_location=None):
        exp_obj, exp_locs = tc.load_with_locations(self.save(expected, exp_location))
        act_obj, act_locs = tc.load_with_locations(self.save(actual, act_location))
        return tc.compare(exp_obj, act_obj, exp_locs, act_locs, options)

    def assert_equal_files(self, obj):
        self.assertEqual(self.diffs(obj, obj), [])

    def assert_detects(self, expected, actual, *needles):
        """expected==expected passes, expected vs actual reports every needle."""
        self.assert_equal_files(expected)
        found = self.diffs(expected, actual)
        text = '\n'.join(found)
        self.assertTrue(found, 'difference not detected')
        for needle in needles:
            self.assertIn(needle, text)
        return found

    def cli(self, *args):
        proc = subprocess.run([sys.executable, SCRIPT, *args],
                              capture_output=True, text=True, check=False)
        return proc.returncode, proc.stdout + proc.stderr

    # -- equality ------------------------------------------------------------

    def test_identical_rich_checkpoint_is_equal(self):
        sd = state_dict()
        base = torch.arange(12.0).reshape(3, 4)
        obj = {
            'state_dict': sd,
            'views': [base, base[1:, ::2], base.t()],
            'param': torch.nn.Parameter(torch.ones(2)),
            'empty': (torch.empty(0), torch.empty(0, dtype=torch.int64)),
            'dtypes': [torch.ones(2, dtype=d) for d in
                       (torch.bfloat16, torch.float16, torch.bool, torch.complex64, torch.int8)],
            'quant': torch.quantize_per_tensor(torch.tensor([1.0, 2.0]), 0.5, 3, torch.quint8),
            'sparse': torch.sparse_coo_tensor([[0, 2]], [1.0, 2.0], (3,)),
            'storage': torch.FloatStorage(3),
            'args': argparse.Namespace(lr=0.1, layers=[1, 2]),
            'np': (np.float64(1.5), np.int32(7), np.arange(6).reshape(2, 3)),
            'py': (1, True, None, 2.5, -0.0, float('nan'), 10 ** 30, 1 + 2j, 'x', b'\x00\xff',
                   bytearray(b'ab'), {1, 2}, frozenset({'a'})),
            'torch_atoms': (torch.float32, torch.Size([2, 3]), torch.device('cpu')),
            'model': torch.nn.Linear(2, 2),
        }
        cyclic = [1]
        cyclic.append(cyclic)
        obj['cycle'] = cyclic
        exp, exp_locs = tc.load_with_locations(self.save(obj))
        act, act_locs = tc.load_with_locations(self.save(obj))
        result = tc.compare_detailed(exp, act, exp_locs, act_locs)
        self.assertEqual(result.diffs, [])
        self.assertGreaterEqual(result.tensors, 15)
        self.assertEqual(set(exp_locs.values()), {'cpu'})

    def test_empty_storages_have_distinct_identities(self):
        obj, locs = tc.load_with_locations(
            self.save({'a': torch.empty(0), 'b': torch.empty(0), 'c': torch.empty(0, 3)}))
        ids = {tc.storage_id(t) for t in obj.values()}
        self.assertEqual(len(ids), 3)
        self.assertEqual(len(locs), 3)
        self.assertTrue(all(i in locs for i in ids))

    def test_legacy_format_equals_zip_format(self):
        w = torch.randn(3, 4)
        obj = {'w': w, 'view': w[1:, ::2], 'e': torch.empty(0), 'n': 1}
        zip_path = self.save(obj, location='cuda:0')
        legacy_path = os.path.join(self.tmp, 'legacy.pt')
        with saved_location('cuda:0'):
            torch.save(obj, legacy_path, _use_new_zipfile_serialization=False)
        exp, exp_locs = tc.load_with_locations(zip_path)
        act, act_locs = tc.load_with_locations(legacy_path)
        self.assertEqual(set(act_locs.values()), {'cuda:0'})
        self.assertEqual(tc.compare(exp, act, exp_locs, act_locs), [])

    # -- values --------------------------------------------------------------

    def test_one_element_value(self):
        x = torch.arange(6.0).reshape(2, 3)
        y = x.clone()
        y[1, 2] = 5.0000005
        found = self.assert_detects({'w': x}, {'w': y}, "['w']: values differ in 1 of 6 elements",
                                    'index (1, 2)', '0x40a00000')
        self.assertTrue(any('storage bytes differ' in d for d in found))

    def test_nan_payload(self):
        self.assert_detects({'w': f32_from_bits(0x7fc00000)}, {'w': f32_from_bits(0x7fc00001)},
                            '0x7fc00000', '0x7fc00001')

    def test_signed_zero_tensor_and_float(self):
        self.assert_detects({'w': torch.tensor([0.0, 1.0])}, {'w': torch.tensor([-0.0, 1.0])},
                            '0x00000000', '0x80000000')
        self.assert_detects({'f': 0.0}, {'f': -0.0}, "['f']: float 0.0 != -0.0")

    def test_python_float_nan_payload(self):
        nan1 = struct.unpack('<d', struct.pack('<Q', 0x7ff8000000000001))[0]
        self.assert_detects({'f': float('nan')}, {'f': nan1}, '0x7ff8000000000001')

    def test_bfloat16_bool_complex_values(self):
        self.assert_detects({'w': torch.tensor([1.5, 2.0], dtype=torch.bfloat16)},
                            {'w': torch.tensor([1.5, 2.5], dtype=torch.bfloat16)}, '0x4000', '0x4020')
        self.assert_detects({'w': torch.tensor([True, False])}, {'w': torch.tensor([True, True])},
                            'values differ in 1 of 2')
        self.assert_detects({'w': torch.tensor([1 + 2j])}, {'w': torch.tensor([1 - 2j])},
                            'values differ in 1 of 1')

    def test_quantized_scale_and_sparse_values(self):
        q = lambda scale: torch.quantize_per_tensor(torch.tensor([1.0, 2.0]), scale, 0, torch.qint8)
        self.assert_detects({'q': q(0.5)}, {'q': q(0.25)}, "['q'].q_scale(): float 0.5 != 0.25")
        sp = lambda v: torch.sparse_coo_tensor([[0, 2]], [1.0, v], (3,))
        self.assert_detects({'s': sp(2.0)}, {'s': sp(3.0)}, "['s']._values(): values differ")

    # -- tensor metadata -------------------------------------------------------

    def test_dtype(self):
        self.assert_detects({'w': torch.ones(3)}, {'w': torch.ones(3, dtype=torch.bfloat16)},
                            "['w']: dtype float32 != bfloat16")

    def test_shape(self):
        x = torch.arange(6.0)
        self.assert_detects({'w': x.reshape(2, 3)}, {'w': x.reshape(3, 2)}, 'shape (2, 3) != (3, 2)')

    def test_stride_transposed_vs_contiguous(self):
        x = torch.arange(6.0).reshape(2, 3).t()
        self.assertTrue(torch.equal(x, x.contiguous()))
        self.assert_detects({'w': x}, {'w': x.contiguous()}, 'stride (1, 3) != (2, 1)')

    def test_storage_offset(self):
        a = torch.tensor([9.0, 1.0, 2.0, 3.0])[1:]
        b = torch.tensor([1.0, 2.0, 3.0, 9.0])[:3]
        self.assertTrue(torch.equal(a, b))
        self.assert_detects({'w': a}, {'w': b}, 'storage_offset 1 != 0')

    def test_view_carries_full_storage(self):
        a = torch.arange(4.0)[:2]
        b = torch.arange(4.0).clone()[:2]
        b.storage()[3] = 7.0        # outside the view: only the storage differs
        self.assert_detects({'w': a}, {'w': b}, 'storage bytes differ in')

    def test_requires_grad(self):
        self.assert_detects({'p': torch.nn.Parameter(torch.ones(2))},
                            {'p': torch.nn.Parameter(torch.ones(2), requires_grad=False)},
                            'requires_grad True != False')

    def test_parameter_vs_tensor(self):
        self.assert_detects({'p': torch.nn.Parameter(torch.ones(2))}, {'p': torch.ones(2)},
                            'type torch.nn.parameter.Parameter != torch.Tensor')

    # -- containers ------------------------------------------------------------

    def test_key_order(self):
        sd = state_dict()
        reordered = collections.OrderedDict(reversed(list(sd.items())))
        reordered._metadata = sd._metadata
        self.assert_detects(sd, reordered, 'key order differs')

    def test_missing_key(self):
        sd = state_dict()
        smaller = collections.OrderedDict(sd)
        smaller._metadata = sd._metadata
        del smaller['1.num_batches_tracked']
        self.assert_detects(sd, smaller, "['1.num_batches_tracked']: key missing in actual")
        self.assert_detects(smaller, sd, "['1.num_batches_tracked']: unexpected key in actual")

    def test_metadata(self):
        sd = state_dict()
        changed = collections.OrderedDict(sd)
        changed._metadata = collections.OrderedDict(
            (k, dict(v)) for k, v in sd._metadata.items())
        changed._metadata['1']['version'] = 1
        self.assert_detects(sd, changed, "._metadata['1']['version']: int 2 != 1")
        no_meta = collections.OrderedDict(sd)
        self.assert_detects(sd, no_meta, '<root>._metadata: attribute missing in actual')

    def test_dict_vs_ordereddict(self):
        self.assert_detects({'a': 1}, collections.OrderedDict(a=1),
                            '<root>: type dict != collections.OrderedDict')

    def test_list_vs_tuple(self):
        self.assert_detects({'a': [1, 2]}, {'a': (1, 2)}, "['a']: type list != tuple")

    def test_int_vs_bool(self):
        self.assert_detects({'a': 1}, {'a': True}, "['a']: type int != bool")
        self.assert_detects({'s': {1}}, {'s': {True}}, 'set elements differ')

    def test_big_int(self):
        self.assert_detects({'a': 2 ** 80}, {'a': 2 ** 80 + 1}, 'int 1208925819614629174706176')

    # -- sharing and identity ------------------------------------------------

    def test_tied_weights_saved_untied(self):
        w = torch.randn(3, 2)
        found = self.assert_detects({'enc': w, 'dec': w[:]}, {'enc': w, 'dec': w.clone()},
                                    'storage sharing differs')
        self.assertFalse(any('same object' in d for d in found), found)
        # and the other way round
        self.assert_detects({'enc': w, 'dec': w.clone()}, {'enc': w, 'dec': w[:]},
                            'storage sharing differs')

    def test_shared_empty_storage(self):
        e = torch.empty(0)
        if torch_keeps_empty_storages_shared():
            self.assert_detects({'a': e, 'b': torch.empty(0)}, {'a': e, 'b': e[:]},
                                'storage sharing differs')
        else:
            # torch 2.x writes one record for both but loads a zero-byte
            # storage once per tensor, so no judge can see this sharing.
            print(f'note: torch {torch.__version__} does not keep zero-byte storages shared on load; '
                  'sharing of empty tensors is not judged', file=sys.stderr)
            self.assertEqual(self.diffs({'a': e, 'b': torch.empty(0)}, {'a': e, 'b': e[:]}), [])

    def test_object_aliasing(self):
        w = torch.ones(2)
        found = self.assert_detects({'a': w, 'b': w}, {'a': w, 'b': w[:]}, 'is the same object as')
        self.assertFalse(any('storage sharing' in d for d in found), found)
        self.assertEqual(self.diffs({'a': w, 'b': w}, {'a': w, 'b': w[:]},
                                    tc.CompareOptions(check_aliasing=False)), [])

    # -- locations -----------------------------------------------------------

    def test_cuda_tagged_file_loads_through_recorder(self):
        path = self.save({'w': torch.ones(2), 'b': torch.zeros(1)}, location='cuda:1')
        with self.assertRaises(RuntimeError):
            torch.load(path)                    # no CUDA here: plain load fails
        obj, locs = tc.load_with_locations(path)
        self.assertEqual(sorted(locs.values()), ['cuda:1', 'cuda:1'])
        self.assertEqual(obj['w'].device.type, 'cpu')
        self.assertEqual(locs.location_of(obj['w']), 'cuda:1')

    def test_different_saved_location(self):
        obj = {'w': torch.ones(2)}
        found = self.diffs(obj, obj, act_location='cuda:1')
        self.assertEqual(found, ["['w']: saved location 'cpu' != 'cuda:1'"])
        self.assertEqual(self.diffs(obj, obj, exp_location='cuda:1', act_location='cuda:1'), [])
        self.assertEqual(self.diffs(obj, obj, tc.CompareOptions(ignore_locations=True),
                                    act_location='cuda:1'), [])
        self.assertEqual(self.diffs(obj, obj, tc.CompareOptions(expect_location='cpu'),
                                    exp_location='cuda:1'), [])
        found = self.diffs(obj, obj, tc.CompareOptions(expect_location='cpu'),
                           act_location='mps')
        self.assertEqual(found, ["['w']: saved location 'mps', expected 'cpu'"])

    # -- other objects -------------------------------------------------------

    def test_numpy_scalar(self):
        self.assert_detects({'n': np.float64(1.5)}, {'n': np.float64(2.5)},
                            "['n']: numpy numpy.float64 1.5 != 2.5")
        self.assert_detects({'n': np.float64(1.5)}, {'n': np.float32(1.5)},
                            'type numpy.float64 != numpy.float32')
        self.assert_detects({'n': np.float64(0.0)}, {'n': np.float64(-0.0)},
                            '0000000000000000 != 0000000000000080')

    def test_numpy_array(self):
        self.assert_detects({'a': np.arange(4.0)}, {'a': np.array([0.0, 1.0, 2.0, -3.0])},
                            'numpy values differ in 1 of 4 elements; first at index (3,)')
        self.assert_detects({'a': np.arange(4)}, {'a': np.arange(4).astype(np.int32)},
                            'numpy dtype int64 != int32')

    def test_namespace(self):
        self.assert_detects({'args': argparse.Namespace(lr=0.1, epochs=3)},
                            {'args': argparse.Namespace(lr=0.1, epochs=4)},
                            "['args'].epochs: int 3 != 4")
        self.assert_detects({'args': argparse.Namespace(lr=0.1)},
                            {'args': argparse.Namespace(lr=0.1, extra=1)},
                            "['args'].extra: unexpected attribute in actual")

    def test_module_parameter(self):
        torch.manual_seed(0)
        m1 = torch.nn.Linear(2, 2)
        m2 = torch.nn.Linear(2, 2)
        m2.load_state_dict(m1.state_dict())
        with torch.no_grad():
            m2.bias[0] += 1
        self.assert_detects(m1, m2, "<root>._parameters['bias']: values differ")

    def test_cycles_terminate(self):
        a = [1]
        a.append(a)
        b = [2]
        b.append(b)
        self.assert_detects(a, b, '[0]: int 1 != 2')

    # -- command line --------------------------------------------------------

    def test_cli(self):
        obj = {'w': torch.arange(3.0), 'n': 1}
        cpu_a, cpu_b = self.save(obj), self.save(obj)
        cuda = self.save(obj, location='cuda:1')
        other = self.save({'w': torch.arange(3.0), 'n': 2})

        code, out = self.cli(cpu_a, cpu_b)
        self.assertEqual((code, out.strip()), (0, 'equal: 1 tensors, 1 storages compared'))
        code, out = self.cli(cpu_a, other)
        self.assertEqual(code, 1, out)
        self.assertIn("['n']: int 1 != 2", out)

        # locations: plain comparison, --expect-location, --ignore-locations
        code, out = self.cli(cpu_a, cuda)
        self.assertEqual(code, 1, out)
        self.assertIn("['w']: saved location 'cpu' != 'cuda:1'", out)
        self.assertEqual(self.cli(cpu_a, cuda, '--ignore-locations')[0], 0)
        self.assertEqual(self.cli(cuda, cpu_a, '--expect-location', 'cpu')[0], 0)
        code, out = self.cli(cpu_a, cuda, '--expect-location', 'cpu')
        self.assertEqual(code, 1, out)
        self.assertIn("saved location 'cuda:1', expected 'cpu'", out)
        self.assertIn('plain torch.load without map_location failed', out)
        self.assertEqual(self.cli(cpu_a, cuda, '--expect-location', 'cuda:1')[0], 0)

        # --max-diffs
        many_a = self.save({str(i): i for i in range(10)})
        many_b = self.save({str(i): i + 1 for i in range(10)})
        code, out = self.cli(many_a, many_b, '--max-diffs', '3')
        self.assertEqual(code, 1)
        self.assertIn('... and 7 more differences', out)
        self.assertEqual(out.count('int '), 3)

        # usage errors and load failures exit 2
        self.assertEqual(self.cli(cpu_a)[0], 2)
        self.assertEqual(self.cli(cpu_a, cpu_b, '--ignore-locations',
                                  '--expect-location', 'cpu')[0], 2)
        code, out = self.cli(cpu_a, os.path.join(self.tmp, 'missing.pt'))
        self.assertEqual(code, 2)
        self.assertIn('cannot load', out)
        garbage = os.path.join(self.tmp, 'garbage.pt')
        with open(garbage, 'wb') as f:
            f.write(b'PK\x03\x04 not really a zip')
        self.assertEqual(self.cli(cpu_a, garbage)[0], 2)

    def test_cli_expected_python(self):
        cuda_exp = self.save({'w': torch.arange(3.0), 'old': torch.ones(1), 'n': 1},
                             location='cuda:0')
        edited = {'w': torch.arange(3.0) * 2, 'old': torch.ones(1), 'n': 1, 'new': torch.zeros(2)}
        act = self.save(edited, location='cuda:0')
        script = os.path.join(self.tmp, 'edit.py')
        with open(script, 'w') as f:
            f.write('import torch\n'
                    'def edit(obj):\n'
                    '    obj["w"] = obj["w"] * 2\n'
                    '    obj["new"] = torch.zeros(2)\n'
                    'def wrong(obj):\n'
                    '    return {**obj, "n": 5}\n')
        self.assertEqual(self.cli(cuda_exp, act, '--ignore-locations')[0], 1)
        # 'w' is a new tensor at an old path: keeps 'cuda:0'; 'new' is a new path: 'cpu'.
        code, out = self.cli(cuda_exp, act, '--expected-python', f'{script}:edit')
        self.assertEqual(code, 1, out)
        self.assertEqual(out.splitlines()[0], "['new']: saved location 'cpu' != 'cuda:0'")
        self.assertEqual(len(out.splitlines()), 2, out)
        code, out = self.cli(cuda_exp, act, '--expected-python', f'{script}:edit',
                             '--ignore-locations')
        self.assertEqual(code, 0, out)
        code, out = self.cli(cuda_exp, act, '--expected-python', f'{script}:wrong',
                             '--ignore-locations')
        self.assertEqual(code, 1, out)
        self.assertIn("['n']: int 5 != 1", out)
        self.assertEqual(self.cli(cuda_exp, act, '--expected-python', f'{script}:nope')[0], 2)


if __name__ == '__main__':
    unittest.main()
