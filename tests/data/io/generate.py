#!/usr/bin/env python3
"""Writes the .npy files read by tests/tensor_io_test.cpp, with numpy's own writer.

Every array is a formula of its flat index i (see tests/tensor_io_test.cpp, which recomputes the
same formulas), so the test checks kiln's reader against numpy's writer, not against itself.
Rerun from the repository root:  python3 tests/data/io/generate.py
"""
import os

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def save(name, arr, version=None, fortran=False):
    path = os.path.join(HERE, name)
    if version is None and not fortran:
        np.save(path, arr)
        return
    with open(path, "wb") as f:
        np.lib.format.write_array(f, np.asfortranarray(arr) if fortran else arr, version=version)


i6 = np.arange(6)
save("f32_2x3.npy", (i6 * 0.5 - 1.0).astype("<f4").reshape(2, 3))
save("f16_4.npy", (np.arange(4) * 0.25 - 0.5).astype("<f2"))
save("f64_scalar.npy", np.array(3.141592653589793, dtype="<f8"))
save("i8_2x2.npy", (np.arange(4) * 50 - 100).astype("i1").reshape(2, 2))
save("u8_3.npy", (np.arange(3) * 100 + 5).astype("u1"))
save("i32_2x1x2.npy", (np.arange(4) * -7 + 3).astype("<i4").reshape(2, 1, 2))
save("i64_5.npy", (np.arange(5, dtype=np.int64) * 1000000007 - (1 << 40)).astype("<i8"))
save("bool_2x3.npy", (i6 % 3 == 0).reshape(2, 3))
save("f32_0x3.npy", np.zeros((0, 3), dtype="<f4"))
save("f32_v2_3.npy", (np.arange(3) + 0.125).astype("<f4"), version=(2, 0))
save("f32_v3_3.npy", (np.arange(3) + 0.125).astype("<f4"), version=(3, 0))
save("f32_fortran_2x3.npy", (i6 * 0.5 - 1.0).astype("<f4").reshape(2, 3), version=(1, 0), fortran=True)
save("f32_bigendian_3.npy", (np.arange(3) + 0.125).astype(">f4"))
save("u16_3.npy", np.arange(3).astype("<u2"))

# onnx.TensorProto files: raw_data (numpy_helper, as ONNX's test data sets are written) and the
# typed repeated fields (helper.make_tensor with raw=False).
import onnx  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


def save_pb(name, proto):
    with open(os.path.join(HERE, name), "wb") as f:
        f.write(proto.SerializeToString())


save_pb("pb_f32_raw_2x3.pb", numpy_helper.from_array((i6 * 0.5 - 1.0).astype("<f4").reshape(2, 3), "x"))
save_pb("pb_i64_raw_5.pb", numpy_helper.from_array((np.arange(5, dtype=np.int64) * 1000000007 - (1 << 40)), "ids"))
save_pb("pb_f32_typed_2x3.pb", helper.make_tensor("ft", TensorProto.FLOAT, [2, 3], list(i6 * 0.5 - 1.0)))
save_pb("pb_f16_typed_4.pb", helper.make_tensor("h", TensorProto.FLOAT16, [4], (np.arange(4) * 0.25 - 0.5).astype(np.float16)))
save_pb("pb_f64_typed_2.pb", helper.make_tensor("d", TensorProto.DOUBLE, [2], [0.1, -2.5e300]))
save_pb("pb_i64_typed_3.pb", helper.make_tensor("l", TensorProto.INT64, [3], [-(1 << 62), 0, 12345678901]))
save_pb("pb_i32_typed_2x2.pb", helper.make_tensor("i", TensorProto.INT32, [2, 2], [3, -4, 2147483647, -2147483648]))
save_pb("pb_i8_typed_3.pb", helper.make_tensor("b", TensorProto.INT8, [3], [-128, 0, 127]))
save_pb("pb_bool_typed_3.pb", helper.make_tensor("m", TensorProto.BOOL, [3], [True, False, True]))
save_pb("pb_string_1.pb", helper.make_tensor("s", TensorProto.STRING, [1], [b"abc"]))
