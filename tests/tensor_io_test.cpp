// Tests of tensor files (src/core/tensor_io.cpp): .npy files written by numpy and
// onnx.TensorProto files written by the onnx Python package (tests/data/io/generate.py) are read
// and compared with the formulas that generated them; kiln's writers must produce the same bytes
// as numpy and onnx; the squeezenet test input is checked against numpy's reading of it; and
// malformed files fail with a kiln::Error naming the file.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include <unistd.h>

#include "core/tensor_io.h"
#include "kiln/error.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

std::string data_path(const std::string& name) { return std::string(KILN_SOURCE_DIR) + "/tests/data/io/" + name; }

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

class TensorIoTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("kiln_tensor_io_" + std::to_string(::getpid()) + "_" +
                                             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string tmp(const std::string& name) const { return (dir_ / name).string(); }

  // The message of the kiln::Error that `fn` throws ("" when it does not throw).
  template <typename Fn>
  static std::string error_of(Fn&& fn) {
    try {
      fn();
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }

  fs::path dir_;
};

template <typename T>
std::vector<T> values_of(const HostTensor& t) {
  EXPECT_EQ(t.nbytes(), static_cast<size_t>(t.count()) * sizeof(T));
  return std::vector<T>(t.as<T>(), t.as<T>() + t.count());
}

// ---- files written by numpy -------------------------------------------------------------------
TEST_F(TensorIoTest, ReadsEveryDtypeWrittenByNumpy) {
  {
    HostTensor t = load_npy(data_path("f32_2x3.npy"));
    EXPECT_EQ(t.type(), DataType::kFloat32);
    EXPECT_EQ(t.dims(), (Dims{2, 3}));
    for (int i = 0; i < 6; ++i) EXPECT_EQ(t.as<float>()[i], i * 0.5f - 1.0f);
  }
  {
    HostTensor t = load_npy(data_path("f16_4.npy"));
    EXPECT_EQ(t.type(), DataType::kFloat16);
    EXPECT_EQ(t.dims(), (Dims{4}));
    // IEEE binary16 of -0.5, -0.25, 0, 0.25.
    EXPECT_EQ(values_of<uint16_t>(t), (std::vector<uint16_t>{0xb800, 0xb400, 0x0000, 0x3400}));
  }
  {
    HostTensor t = load_npy(data_path("f64_scalar.npy"));
    EXPECT_EQ(t.type(), DataType::kFloat64);
    EXPECT_EQ(t.dims().rank(), 0);
    EXPECT_EQ(values_of<double>(t), (std::vector<double>{3.141592653589793}));
  }
  {
    HostTensor t = load_npy(data_path("i8_2x2.npy"));
    EXPECT_EQ(t.type(), DataType::kInt8);
    EXPECT_EQ(t.dims(), (Dims{2, 2}));
    EXPECT_EQ(values_of<int8_t>(t), (std::vector<int8_t>{-100, -50, 0, 50}));
  }
  {
    HostTensor t = load_npy(data_path("u8_3.npy"));
    EXPECT_EQ(t.type(), DataType::kUInt8);
    EXPECT_EQ(values_of<uint8_t>(t), (std::vector<uint8_t>{5, 105, 205}));
  }
  {
    HostTensor t = load_npy(data_path("i32_2x1x2.npy"));
    EXPECT_EQ(t.type(), DataType::kInt32);
    EXPECT_EQ(t.dims(), (Dims{2, 1, 2}));
    EXPECT_EQ(values_of<int32_t>(t), (std::vector<int32_t>{3, -4, -11, -18}));
  }
  {
    HostTensor t = load_npy(data_path("i64_5.npy"));
    EXPECT_EQ(t.type(), DataType::kInt64);
    for (int64_t i = 0; i < 5; ++i) EXPECT_EQ(t.as<int64_t>()[i], i * 1000000007 - (int64_t{1} << 40));
  }
  {
    HostTensor t = load_npy(data_path("bool_2x3.npy"));
    EXPECT_EQ(t.type(), DataType::kBool);
    EXPECT_EQ(t.dims(), (Dims{2, 3}));
    EXPECT_EQ(values_of<uint8_t>(t), (std::vector<uint8_t>{1, 0, 0, 1, 0, 0}));
  }
  {
    HostTensor t = load_npy(data_path("f32_0x3.npy"));
    EXPECT_EQ(t.dims(), (Dims{0, 3}));
    EXPECT_EQ(t.count(), 0);
  }
  for (const char* name : {"f32_v2_3.npy", "f32_v3_3.npy"}) {  // format versions 2.0 and 3.0
    HostTensor t = load_tensor_file(data_path(name));
    EXPECT_EQ(values_of<float>(t), (std::vector<float>{0.125f, 1.125f, 2.125f})) << name;
  }
}

TEST_F(TensorIoTest, RejectsWhatItCannotRepresent) {
  std::string err = error_of([] { load_npy(data_path("f32_fortran_2x3.npy")); });
  EXPECT_NE(err.find("Fortran"), std::string::npos) << err;
  EXPECT_NE(err.find("f32_fortran_2x3.npy"), std::string::npos) << err;
  err = error_of([] { load_npy(data_path("f32_bigendian_3.npy")); });
  EXPECT_NE(err.find("big-endian"), std::string::npos) << err;
  const HostTensor u16 = load_npy(data_path("u16_3.npy"));  // written by numpy; kiln has uint16 now
  EXPECT_EQ(u16.type(), DataType::kUInt16);
  EXPECT_EQ(u16.to_int64(), (std::vector<int64_t>{0, 1, 2}));
}

TEST_F(TensorIoTest, SaveNpyWritesWhatNumpyWrites) {
  std::vector<float> f(6);
  for (int i = 0; i < 6; ++i) f[static_cast<size_t>(i)] = i * 0.5f - 1.0f;
  save_npy(tmp("a.npy"), HostTensor::from_vector(DataType::kFloat32, Dims{2, 3}, f));
  EXPECT_EQ(read_bytes(tmp("a.npy")), read_bytes(data_path("f32_2x3.npy")));

  save_npy(tmp("b.npy"), HostTensor::from_vector<double>(DataType::kFloat64, Dims{}, {3.141592653589793}));
  EXPECT_EQ(read_bytes(tmp("b.npy")), read_bytes(data_path("f64_scalar.npy")));

  save_npy(tmp("c.npy"), HostTensor::from_vector<uint8_t>(DataType::kBool, Dims{2, 3}, {1, 0, 0, 1, 0, 0}));
  EXPECT_EQ(read_bytes(tmp("c.npy")), read_bytes(data_path("bool_2x3.npy")));

  save_npy(tmp("d.npy"), HostTensor::from_vector<int8_t>(DataType::kInt8, Dims{2, 2}, {-100, -50, 0, 50}));
  EXPECT_EQ(read_bytes(tmp("d.npy")), read_bytes(data_path("i8_2x2.npy")));

  save_npy(tmp("e.npy"), HostTensor::from_vector<uint16_t>(DataType::kFloat16, Dims{4}, {0xb800, 0xb400, 0, 0x3400}));
  EXPECT_EQ(read_bytes(tmp("e.npy")), read_bytes(data_path("f16_4.npy")));

  save_npy(tmp("f.npy"), HostTensor(DataType::kFloat32, Dims{0, 3}));
  EXPECT_EQ(read_bytes(tmp("f.npy")), read_bytes(data_path("f32_0x3.npy")));
}

TEST_F(TensorIoTest, RoundTripsEveryTypeAndRank) {
  std::mt19937 rng(7);
  const DataType types[] = {DataType::kFloat32, DataType::kFloat16, DataType::kInt8, DataType::kUInt8,
                            DataType::kInt32,   DataType::kInt64,   DataType::kBool, DataType::kFloat64};
  const Dims shapes[] = {Dims{}, Dims{1}, Dims{7}, Dims{2, 3, 5}, Dims{1, 2, 1, 2, 1, 2, 1, 2}, Dims{3, 0}};
  for (DataType type : types) {
    for (const Dims& dims : shapes) {
      HostTensor t(type, dims);
      auto* p = static_cast<uint8_t*>(t.data());
      for (size_t i = 0; i < t.nbytes(); ++i) p[i] = type == DataType::kBool ? rng() % 2 : static_cast<uint8_t>(rng());
      const std::string what = std::string(to_string(type)) + " " + dims.to_string();
      for (const char* ext : {".npy", ".pb"}) {
        const std::string path = tmp(std::string("t") + ext);
        if (std::string(ext) == ".npy") {
          save_npy(path, t);
        } else {
          save_tensor_pb(path, t, "tensor:" + what);
        }
        std::string name;
        HostTensor back = std::string(ext) == ".npy" ? load_tensor_file(path) : load_tensor_pb(path, &name);
        EXPECT_EQ(back.type(), type) << what << ext;
        EXPECT_EQ(back.dims(), dims) << what << ext;
        ASSERT_EQ(back.nbytes(), t.nbytes()) << what << ext;
        if (t.nbytes()) {
          EXPECT_EQ(std::memcmp(back.data(), t.data(), t.nbytes()), 0) << what << ext;
        }
        if (std::string(ext) == ".pb") {
          EXPECT_EQ(name, "tensor:" + what);
        }
      }
    }
  }
}

// ---- onnx.TensorProto files written by the onnx package ------------------------------------
TEST_F(TensorIoTest, ReadsTensorProtosWrittenByOnnx) {
  std::string name;
  HostTensor t = load_tensor_pb(data_path("pb_f32_raw_2x3.pb"), &name);
  EXPECT_EQ(name, "x");
  EXPECT_EQ(t.dims(), (Dims{2, 3}));
  for (int i = 0; i < 6; ++i) EXPECT_EQ(t.as<float>()[i], i * 0.5f - 1.0f);

  t = load_tensor_pb(data_path("pb_f32_typed_2x3.pb"), &name);  // float_data
  EXPECT_EQ(name, "ft");
  EXPECT_EQ(t.type(), DataType::kFloat32);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(t.as<float>()[i], i * 0.5f - 1.0f);

  t = load_tensor_file(data_path("pb_f16_typed_4.pb"));  // float16 bits in int32_data
  EXPECT_EQ(t.type(), DataType::kFloat16);
  EXPECT_EQ(values_of<uint16_t>(t), (std::vector<uint16_t>{0xb800, 0xb400, 0x0000, 0x3400}));

  t = load_tensor_file(data_path("pb_f64_typed_2.pb"));  // double_data
  EXPECT_EQ(values_of<double>(t), (std::vector<double>{0.1, -2.5e300}));

  t = load_tensor_file(data_path("pb_i64_typed_3.pb"));  // int64_data
  EXPECT_EQ(values_of<int64_t>(t), (std::vector<int64_t>{-(int64_t{1} << 62), 0, 12345678901}));

  t = load_tensor_file(data_path("pb_i64_raw_5.pb"));
  for (int64_t i = 0; i < 5; ++i) EXPECT_EQ(t.as<int64_t>()[i], i * 1000000007 - (int64_t{1} << 40));

  t = load_tensor_file(data_path("pb_i32_typed_2x2.pb"));
  EXPECT_EQ(values_of<int32_t>(t), (std::vector<int32_t>{3, -4, 2147483647, -2147483647 - 1}));

  t = load_tensor_file(data_path("pb_i8_typed_3.pb"));
  EXPECT_EQ(values_of<int8_t>(t), (std::vector<int8_t>{-128, 0, 127}));

  t = load_tensor_file(data_path("pb_bool_typed_3.pb"));
  EXPECT_EQ(t.type(), DataType::kBool);
  EXPECT_EQ(values_of<uint8_t>(t), (std::vector<uint8_t>{1, 0, 1}));

  t = load_tensor_file(data_path("pb_string_1.pb"));  // string_data (kString tensors)
  EXPECT_EQ(t.type(), DataType::kString);
  EXPECT_EQ(t.dims(), (Dims{1}));
  EXPECT_EQ(t.string_at(0), "abc");
}

TEST_F(TensorIoTest, SaveTensorPbWritesWhatOnnxWrites) {
  std::vector<float> f(6);
  for (int i = 0; i < 6; ++i) f[static_cast<size_t>(i)] = i * 0.5f - 1.0f;
  save_tensor_pb(tmp("x.pb"), HostTensor::from_vector(DataType::kFloat32, Dims{2, 3}, f), "x");
  EXPECT_EQ(read_bytes(tmp("x.pb")), read_bytes(data_path("pb_f32_raw_2x3.pb")));
}

// The ONNX test data of squeezenet, against numpy_helper.to_array of the same files.
TEST_F(TensorIoTest, SqueezenetTestDataMatchesNumpy) {
  const std::string dir = std::string(KILN_SOURCE_DIR) + "/../shared/models/squeezenet1_1/test_data_set_0/";
  if (!fs::exists(dir + "input_0.pb")) GTEST_SKIP() << "no " << dir << "input_0.pb";
  std::string name;
  HostTensor in = load_tensor_pb(dir + "input_0.pb", &name);
  EXPECT_EQ(name, "input");
  EXPECT_EQ(in.type(), DataType::kFloat32);
  ASSERT_EQ(in.dims(), (Dims{1, 3, 224, 224}));
  double sum = 0, sum_sq = 0;
  for (int64_t i = 0; i < in.count(); ++i) {
    sum += in.as<float>()[i];
    sum_sq += static_cast<double>(in.as<float>()[i]) * in.as<float>()[i];
  }
  EXPECT_NEAR(sum, 75063.65595042706, 1e-5);
  EXPECT_NEAR(sum_sq, 49985.13344024894, 1e-5);
  EXPECT_EQ(in.as<float>()[0], 0.46958833932876587f);
  EXPECT_EQ(in.as<float>()[1], 0.19404208660125732f);
  EXPECT_EQ(in.as<float>()[1000], 0.2606530785560608f);
  EXPECT_EQ(in.as<float>()[50175], 0.40865492820739746f);
  EXPECT_EQ(in.as<float>()[150527], 0.7672787308692932f);

  HostTensor out = load_tensor_file(dir + "output_0.pb");
  ASSERT_EQ(out.dims(), (Dims{1, 1000}));
  double out_sum = 0;
  int64_t argmax = 0;
  for (int64_t i = 0; i < out.count(); ++i) {
    out_sum += out.as<float>()[i];
    if (out.as<float>()[i] > out.as<float>()[argmax]) argmax = i;
  }
  EXPECT_NEAR(out_sum, 40.91674511166718, 1e-9);
  EXPECT_EQ(argmax, 434);
  EXPECT_EQ(out.as<float>()[434], 0.35818010568618774f);
}

// ---- malformed files ----------------------------------------------------------------------
TEST_F(TensorIoTest, MalformedNpyFilesNameTheFile) {
  const std::string good = read_bytes(data_path("f32_2x3.npy"));
  struct Case {
    const char* name;
    std::string bytes;
    const char* expect;
  };
  // Edits the header text and rewrites its length field (format 1.0: 2 bytes at offset 8).
  auto replaced = [&](const std::string& from, const std::string& to) {
    const size_t len = static_cast<uint8_t>(good[8]) | static_cast<size_t>(static_cast<uint8_t>(good[9])) << 8;
    std::string header = good.substr(10, len);
    header.replace(header.find(from), from.size(), to);
    std::string out = good.substr(0, 8);
    out += static_cast<char>(header.size() & 0xff);
    out += static_cast<char>(header.size() >> 8);
    return out + header + good.substr(10 + len);
  };
  std::string big_len = good;
  big_len[8] = '\xff';
  big_len[9] = '\xff';
  std::string v9 = good;
  v9[6] = 9;
  const std::vector<Case> cases = {
      {"empty", "", "not a .npy file"},
      {"magic", "PK\x03\x04" + good.substr(4), "not a .npy file"},
      {"version", v9, "version 9.0"},
      {"header length", big_len, "truncated .npy header"},
      {"short data", good.substr(0, good.size() - 1), "truncated file"},
      {"extra data", good + "x", "data is 25 bytes"},
      {"unknown key", replaced("'shape'", "'shapf'"), "unexpected key"},
      {"shape not a tuple", replaced("(2, 3)", "[2, 3]"), "expected '('"},
      {"negative extent", replaced("(2, 3)", "(2,-3)"), "malformed .npy header"},
      {"rank 9", replaced("(2, 3), }", "(1,1,1,1,1,1,1,1,1)}"), "rank exceeds"},
      {"overflowing shape", replaced("(2, 3)", "(99999999999,99999999999)"), "more than 2^63"},
      {"huge shape", replaced("(2, 3)", "(4611686018427387904,)"), "data is 24 bytes but shape (4611686018427387904,)"},
      {"structured dtype", replaced("'<f4'", "[('a','<f4')]"), "only simple dtypes"},
      {"no closing brace", replaced("}", " "), "malformed .npy header"},
      {"bad separator", replaced(", 'shape'", "; 'shape'"), "expected ',' or '}'"},
  };
  for (const auto& c : cases) {
    const std::string path = tmp(std::string("bad ") + c.name + ".npy");
    write_bytes(path, c.bytes);
    const std::string err = error_of([&] { load_tensor_file(path); });
    EXPECT_NE(err.find(c.expect), std::string::npos) << c.name << ": '" << err << "'";
    EXPECT_NE(err.find(path), std::string::npos) << c.name << ": the error must name the file: " << err;
  }
  // Every truncation fails cleanly.
  for (size_t len = 0; len < good.size(); ++len) {
    write_bytes(tmp("cut.npy"), good.substr(0, len));
    EXPECT_NE(error_of([&] { load_npy(tmp("cut.npy")); }), "") << "length " << len;
  }
}

TEST_F(TensorIoTest, MalformedPbFilesNameTheFile) {
  write_bytes(tmp("garbage.pb"), std::string("\xff\xff\xff\xff\x0f not a protobuf", 20));
  std::string err = error_of([&] { load_tensor_pb(tmp("garbage.pb")); });
  EXPECT_NE(err.find("garbage.pb"), std::string::npos) << err;

  // dims 2^40 x 2^20 with two floats of raw data: caught before any allocation.
  const std::string huge = std::string("\x08\x80\x80\x80\x80\x80\x20\x08\x80\x80\x40\x10\x01", 13) +
                           std::string("\x4a\x08", 2) + std::string(8, '\0');
  write_bytes(tmp("huge.pb"), huge);
  err = error_of([&] { load_tensor_pb(tmp("huge.pb")); });
  EXPECT_NE(err.find("huge.pb"), std::string::npos) << err;
  EXPECT_NE(err.find("more elements"), std::string::npos) << err;

  // Raw data of the wrong length.
  std::string short_raw = read_bytes(data_path("pb_f32_raw_2x3.pb"));
  short_raw.resize(short_raw.size() - 4);
  short_raw[short_raw.size() - 21] = 20;  // raw_data length byte (24 -> 20)
  write_bytes(tmp("short.pb"), short_raw);
  err = error_of([&] { load_tensor_pb(tmp("short.pb")); });
  EXPECT_NE(err.find("short.pb"), std::string::npos) << err;

  for (size_t len = 0; len + 1 < read_bytes(data_path("pb_f32_raw_2x3.pb")).size(); ++len) {
    write_bytes(tmp("cut.pb"), read_bytes(data_path("pb_f32_raw_2x3.pb")).substr(0, len));
    EXPECT_NE(error_of([&] { load_tensor_pb(tmp("cut.pb")); }), "") << "length " << len;
  }

  err = error_of([&] { load_tensor_file(tmp("missing.npy")); });
  EXPECT_NE(err.find("missing.npy"), std::string::npos) << err;
  err = error_of([&] { load_tensor_file(tmp("values.txt")); });
  EXPECT_NE(err.find("values.txt"), std::string::npos) << err;
  EXPECT_NE(err.find(".npy"), std::string::npos) << err;
  err = error_of([&] { save_npy((dir_ / "no_such_dir" / "x.npy").string(), HostTensor(DataType::kFloat32, Dims{1})); });
  EXPECT_NE(err.find("x.npy"), std::string::npos) << err;
  err = error_of([&] { save_npy(tmp("empty.npy"), HostTensor()); });
  EXPECT_NE(err.find("no data"), std::string::npos) << err;
}

TEST(TensorIo, SanitizeFileName) {
  EXPECT_EQ(sanitize_file_name("input_0.pb"), "input_0.pb");
  EXPECT_EQ(sanitize_file_name("resnet/conv1:0 out"), "resnet_conv1_0_out");
  EXPECT_EQ(sanitize_file_name("A-z.9"), "A-z.9");
  EXPECT_EQ(sanitize_file_name("caf\xc3\xa9"), "caf__");
  EXPECT_EQ(sanitize_file_name(".."), "__");
  EXPECT_EQ(sanitize_file_name(""), "_");
}

}  // namespace
}  // namespace kiln
