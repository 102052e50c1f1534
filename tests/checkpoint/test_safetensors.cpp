// Tests of the safetensors reader/writer and CRC-32C checksums: round trips, the exact byte
// layout, every hostile-header case, atomic writes that fail part way, and (where Python's
// safetensors is installed) loading our output with the reference implementation.
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "checkpoint/bounded_json.h"
#include "checkpoint/checksum.h"
#include "checkpoint/safetensors.h"
#include "core/error.h"
#include "support/catch.h"
#include "support/test_util.h"

#if defined(CNN_CATCH3)
#define HAS_PHRASE(s) Catch::Matchers::ContainsSubstring(s)
#else
#define HAS_PHRASE(s) Catch::Matchers::Contains(s)
#endif

using namespace cnn;
namespace fs = std::filesystem;

namespace {

// 8-byte little-endian length, then the header exactly as given, then the data bytes.
std::string make_file(const std::string& header, const std::string& data = "") {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((static_cast<uint64_t>(header.size()) >> (8 * i)) & 0xff);
  return out + header + data;
}

std::string with_length(uint64_t n, const std::string& rest) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + rest;
}

template <typename T>
std::vector<T> bytes_as(const std::vector<uint8_t>& b) {
  std::vector<T> out(b.size() / sizeof(T));
  if (!b.empty()) std::memcpy(out.data(), b.data(), b.size());
  return out;
}

// The fixture tools/check_safetensors.py knows by heart.
SafetensorsWriter python_fixture() {
  SafetensorsWriter w;
  std::vector<float> f32(6);
  for (int i = 0; i < 6; ++i) f32[i] = 0.5f * i - 1.25f;
  w.add_f32("conv1.weight", {2, 3}, f32.data());
  double f64 = -3.5;
  w.add("scalar.f64", DType::f64, {}, &f64, 8);
  std::vector<int64_t> i64{-2, 0, 7, int64_t{1} << 40};
  w.add("steps.i64", DType::i64, {4}, i64.data(), 32);
  std::vector<uint16_t> f16{0x3C00, 0xC000, 0x3555};  // 1, -2, 0.33325195
  w.add("half.f16", DType::f16, {3}, f16.data(), 6);
  std::vector<uint16_t> bf16{0x3F80, 0x4049};  // 1, 3.140625
  w.add("brain.bf16", DType::bf16, {1, 2}, bf16.data(), 4);
  uint8_t u8 = 200;
  w.add("byte.u8", DType::u8, {}, &u8, 1);
  std::vector<uint8_t> flags{1, 0, 1};
  w.add("mask.bool", DType::boolean, {3}, flags.data(), 3);
  w.add("empty.f32", DType::f32, {0, 3}, nullptr, 0);
  w.set_metadata("format", "cnn-train/1");
  w.set_metadata("epoch", "3");
  add_checksums(w);
  return w;
}

}  // namespace

TEST_CASE("dtype names parse back to the same dtype with the format's element sizes", "[cpu]") {
  for (DType t : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::f8_e4m3, DType::f8_e5m2, DType::i64,
                  DType::i32, DType::i16, DType::i8, DType::u64, DType::u32, DType::u16, DType::u8, DType::boolean})
    CHECK(parse_dtype(dtype_name(t)) == t);
  CHECK(std::string(dtype_name(DType::boolean)) == "BOOL");
  CHECK(dtype_size(DType::f64) == 8);
  CHECK(dtype_size(DType::bf16) == 2);
  CHECK(dtype_size(DType::boolean) == 1);
  CHECK_THROWS_WITH(parse_dtype("f32"), HAS_PHRASE("unknown dtype 'f32'"));
}

TEST_CASE("safetensors round trip keeps every dtype, shape, byte and the add order", "[cpu]") {
  SafetensorsWriter w = python_fixture();
  SafetensorsFile f = SafetensorsFile::parse(w.serialize());
  CHECK(f.names() == w.names());
  for (const auto& name : w.names()) {
    INFO(name);
    CHECK(f.read_bytes(name) == w.tensor_bytes(name));
  }
  CHECK(f.info("scalar.f64").shape.empty());
  CHECK(f.info("scalar.f64").numel() == 1);
  CHECK(f.info("scalar.f64").dtype == DType::f64);
  CHECK(f.info("empty.f32").shape == std::vector<int64_t>{0, 3});
  CHECK(f.info("empty.f32").bytes() == 0);
  CHECK(f.read_f32("empty.f32").empty());
  CHECK(f.info("steps.i64").shape == std::vector<int64_t>{4});
  CHECK(bytes_as<int64_t>(f.read_bytes("steps.i64")) == std::vector<int64_t>{-2, 0, 7, int64_t{1} << 40});
  CHECK(f.read_f32("conv1.weight") == std::vector<float>{-1.25f, -0.75f, -0.25f, 0.25f, 0.75f, 1.25f});
  CHECK(f.read_f32("scalar.f64") == std::vector<float>{-3.5f});
  CHECK(f.info("brain.bf16").shape == std::vector<int64_t>{1, 2});
  CHECK_THROWS_WITH(f.info("nope"), HAS_PHRASE("no tensor named 'nope'"));
}

TEST_CASE("metadata round trips and a file without metadata reads as empty", "[cpu]") {
  SafetensorsWriter w;
  w.set_metadata("config", "name: x\nlayers: [\"a\\b\"]\n");
  w.set_metadata("epoch", "1");
  w.set_metadata("epoch", "2");
  w.set_metadata("unicode", "\xc3\xa9t\xc3\xa9");
  SafetensorsFile f = SafetensorsFile::parse(w.serialize());
  CHECK(f.metadata() == w.metadata());
  CHECK(f.metadata().at("epoch") == "2");
  CHECK(f.names().empty());
  CHECK(SafetensorsFile::parse(SafetensorsWriter().serialize()).metadata().empty());
  CHECK(SafetensorsWriter().serialize() == make_file("{}      "));
}

TEST_CASE("writer lays out a tiny file byte for byte like the reference writer", "[cpu]") {
  SafetensorsWriter w;
  float a[2] = {1.0f, -2.0f};
  uint8_t b = 7;
  w.add_f32("a", {2}, a);
  w.add("b", DType::u8, {}, &b, 1);
  w.set_metadata("k", "v");
  const std::string json =
      R"({"__metadata__":{"k":"v"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("b":{"dtype":"U8","shape":[],"data_offsets":[8,9]}})";
  REQUIRE(json.size() == 130);
  std::string expected("\x88\0\0\0\0\0\0\0", 8);  // 136 = 130 + 6 spaces of padding
  expected += json + "      ";
  expected += std::string("\x00\x00\x80\x3f\x00\x00\x00\xc0\x07", 9);  // 1.0f, -2.0f, 7
  std::string got = w.serialize();
  CHECK(got == expected);
  CHECK((got.size() - 9) % 8 == 0);
}

TEST_CASE("reader returns tensors in data order whatever the header order", "[cpu]") {
  std::string header = R"({"z":{"dtype":"I8","shape":[1],"data_offsets":[0,1]},)"
                       R"("__metadata__":{"m":"1"},"a":{"data_offsets":[1,3],"shape":[2],"dtype":"U8"}})";
  SafetensorsFile f = SafetensorsFile::parse(make_file(header, "\x05\x06\x07"));
  CHECK(f.names() == std::vector<std::string>{"z", "a"});
  CHECK(f.read_bytes("a") == std::vector<uint8_t>{6, 7});
  CHECK(f.metadata().at("m") == "1");
}

TEST_CASE("read_f32 converts F64, F16 and BF16 exactly and refuses integer dtypes", "[cpu]") {
  CHECK(half_to_float(0x3C00) == 1.0f);
  CHECK(half_to_float(0xC000) == -2.0f);
  CHECK(half_to_float(0x7BFF) == 65504.0f);
  CHECK(half_to_float(0x0001) == std::ldexp(1.0f, -24));
  CHECK(half_to_float(0x03FF) == std::ldexp(1023.0f, -24));
  CHECK(half_to_float(0x0400) == std::ldexp(1.0f, -14));
  CHECK(std::isinf(half_to_float(0xFC00)));
  CHECK(half_to_float(0xFC00) < 0);
  CHECK(std::isnan(half_to_float(0x7E00)));
  CHECK(std::signbit(half_to_float(0x8000)));
  CHECK(bf16_to_float(0x3F80) == 1.0f);
  CHECK(bf16_to_float(0x4049) == 3.140625f);

  SafetensorsFile f = SafetensorsFile::parse(python_fixture().serialize());
  CHECK(f.read_f32("half.f16") == std::vector<float>{1.0f, -2.0f, half_to_float(0x3555)});
  CHECK(half_to_float(0x3555) == Approx(0.33325195f));
  CHECK(f.read_f32("brain.bf16") == std::vector<float>{1.0f, 3.140625f});
  CHECK_THROWS_WITH(f.read_f32("steps.i64"), HAS_PHRASE("has dtype I64"));
}

TEST_CASE("hostile safetensors headers are rejected with a clear error", "[cpu]") {
  auto rejects = [](const std::string& bytes) { return SafetensorsFile::parse(bytes, "evil.safetensors"); };
  auto entry = [](const std::string& body) { return make_file("{\"t\":" + body + "}", std::string(8, '\0')); };
  const std::string ok_body = R"({"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  REQUIRE(rejects(entry(ok_body)).names() == std::vector<std::string>{"t"});

  SECTION("file shorter than 8 bytes") {
    CHECK_THROWS_WITH(rejects("abc"), HAS_PHRASE("evil.safetensors: file is 3 bytes, shorter than the 8-byte"));
  }
  SECTION("header length larger than the file") {
    CHECK_THROWS_WITH(rejects(with_length(1000, "{}")), HAS_PHRASE("header length 1000 is larger than the 2 bytes"));
  }
  SECTION("header length above 100 MB") {
    CHECK_THROWS_WITH(rejects(with_length(100'000'001, "{}")), HAS_PHRASE("exceeds the limit of 100000000"));
    CHECK_THROWS_WITH(rejects(with_length(~uint64_t{0}, "{}")), HAS_PHRASE("exceeds the limit"));
  }
  SECTION("header that is not JSON") {
    CHECK_THROWS_WITH(rejects(make_file("{\"t\":")), HAS_PHRASE("header is not valid JSON"));
    CHECK_THROWS_WITH(rejects(make_file("{} x")), HAS_PHRASE("header is not valid JSON"));
    CHECK_THROWS_WITH(rejects(make_file("{\"\xff\":1}")), HAS_PHRASE("header is not valid JSON"));
  }
  SECTION("header that is not an object") {
    CHECK_THROWS_WITH(rejects(make_file("[1, 2]")), HAS_PHRASE("header must be a JSON object"));
    CHECK_THROWS_WITH(rejects(make_file(" {}")), HAS_PHRASE("header must be a JSON object"));
    CHECK_THROWS_WITH(rejects(make_file("")), HAS_PHRASE("header must be a JSON object"));
  }
  SECTION("entry that is not an object") {
    CHECK_THROWS_WITH(rejects(entry("[0, 8]")), HAS_PHRASE("tensor 't': entry must be an object"));
  }
  SECTION("missing fields") {
    CHECK_THROWS_WITH(rejects(entry(R"({"shape":[2],"data_offsets":[0,8]})")), HAS_PHRASE("missing 'dtype'"));
    CHECK_THROWS_WITH(rejects(entry(R"({"dtype":"F32","data_offsets":[0,8]})")), HAS_PHRASE("missing 'shape'"));
    CHECK_THROWS_WITH(rejects(entry(R"({"dtype":"F32","shape":[2]})")), HAS_PHRASE("missing 'data_offsets'"));
  }
  SECTION("wrongly typed fields") {
    CHECK_THROWS_WITH(rejects(entry(R"({"dtype":4,"shape":[2],"data_offsets":[0,8]})")),
                      HAS_PHRASE("'dtype' must be a string, got number"));
    CHECK_THROWS_WITH(rejects(entry(R"({"dtype":"F32","shape":"2","data_offsets":[0,8]})")),
                      HAS_PHRASE("'shape' must be an array of integers, got string"));
    CHECK_THROWS_WITH(rejects(entry(R"({"dtype":"F32","shape":[2],"data_offsets":{"b":0}})")),
                      HAS_PHRASE("'data_offsets' must be an array"));
  }
  SECTION("unknown dtype") {
    CHECK_THROWS_WITH(rejects(entry(R"({"dtype":"F33","shape":[2],"data_offsets":[0,8]})")),
                      HAS_PHRASE("tensor 't': unknown dtype 'F33' (known: F64, F32"));
  }
  SECTION("negative or non-integer dimensions") {
    CHECK_THROWS_WITH(rejects(entry(R"({"dtype":"F32","shape":[-2],"data_offsets":[0,8]})")),
                      HAS_PHRASE("shape[0] must be a non-negative integer below 2^63, got -2"));
    CHECK_THROWS_WITH(rejects(entry(R"({"dtype":"F32","shape":[1,2.0],"data_offsets":[0,8]})")),
                      HAS_PHRASE("shape[1] must be a non-negative integer"));
    CHECK_THROWS_WITH(rejects(entry(R"({"dtype":"F32","shape":["2"],"data_offsets":[0,8]})")),
                      HAS_PHRASE("shape[0] must be a non-negative integer"));
    CHECK_THROWS_WITH(rejects(entry(R"({"dtype":"F32","shape":[18446744073709551615],"data_offsets":[0,8]})")),
                      HAS_PHRASE("shape[0] must be a non-negative integer below 2^63"));
  }
  SECTION("shape product overflow") {
    CHECK_THROWS_WITH(rejects(entry(R"({"dtype":"F32","shape":[4294967296,4294967296,0],"data_offsets":[0,0]})")),
                      HAS_PHRASE("overflows"));
    // The element count fits in 63 bits but the byte count does not.
    CHECK_THROWS_WITH(rejects(entry(R"({"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,8]})")),
                      HAS_PHRASE("overflows"));
  }
  SECTION("offsets that are malformed, reversed or out of the data section") {
    CHECK_THROWS_WITH(rejects(entry(R"({"dtype":"F32","shape":[2],"data_offsets":[0]})")),
                      HAS_PHRASE("data_offsets must be [begin, end]"));
    CHECK_THROWS_WITH(rejects(entry(R"({"dtype":"F32","shape":[2],"data_offsets":[-8,0]})")),
                      HAS_PHRASE("data_offsets must be [begin, end]"));
    CHECK_THROWS_WITH(rejects(entry(R"({"dtype":"F32","shape":[0],"data_offsets":[8,4]})")),
                      HAS_PHRASE("data_offsets end 4 is before begin 8"));
    CHECK_THROWS_WITH(rejects(entry(R"({"dtype":"F32","shape":[4],"data_offsets":[0,16]})")),
                      HAS_PHRASE("run past the end of the data section (8 bytes)"));
  }
  SECTION("overlapping tensors") {
    std::string h = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                    R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})";
    CHECK_THROWS_WITH(rejects(make_file(h, std::string(12, '\0'))),
                      HAS_PHRASE("tensor 'b' at [4, 12] overlaps tensor 'a' at [0, 8]"));
  }
  SECTION("gaps in the data section") {
    std::string h = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                    R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})";
    CHECK_THROWS_WITH(rejects(make_file(h, std::string(12, '\0'))),
                      HAS_PHRASE("gap in the data section: bytes [4, 8) before tensor 'b'"));
    CHECK_THROWS_WITH(rejects(make_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
                                        std::string(8, '\0'))),
                      HAS_PHRASE("trailing bytes belong to no tensor"));
  }
  SECTION("byte size that does not match the shape") {
    CHECK_THROWS_WITH(rejects(entry(R"({"dtype":"F32","shape":[3],"data_offsets":[0,8]})")),
                      HAS_PHRASE("hold 8 bytes but F32 [3] needs 12 bytes"));
  }
  SECTION("metadata that is not an object of strings") {
    CHECK_THROWS_WITH(rejects(make_file(R"({"__metadata__":["a"]})")), HAS_PHRASE("must be an object of strings"));
    CHECK_THROWS_WITH(rejects(make_file(R"({"__metadata__":{"epoch":3}})")),
                      HAS_PHRASE("'__metadata__' value of key 'epoch' must be a string, got number 3"));
  }
  SECTION("duplicate names and duplicate fields") {
    std::string h = "{\"t\":" + ok_body + ",\"t\":" + ok_body + "}";
    CHECK_THROWS_WITH(rejects(make_file(h, std::string(8, '\0'))), HAS_PHRASE("duplicate key 't'"));
    CHECK_THROWS_WITH(rejects(entry(R"({"dtype":"F32","dtype":"F64","shape":[2],"data_offsets":[0,8]})")),
                      HAS_PHRASE("duplicate key 'dtype'"));
  }
  SECTION("absurdly deep nesting") {
    std::string deep = std::string(10000, '[') + std::string(10000, ']');
    CHECK_THROWS_WITH(rejects(make_file("{\"__metadata__\":" + deep + "}")), HAS_PHRASE("nests deeper than"));
  }
}

namespace {

// A header of `n` zero-size F32 tensors "t0", "t1", ... (and `tail` before the closing brace).
std::string zero_size_header(size_t n, const std::string& tail = "") {
  std::string h = "{";
  h.reserve(n * 56 + tail.size() + 2);
  for (size_t i = 0; i < n; ++i)
    h += fmt::format("{}\"t{}\":{{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}}", i ? "," : "", i);
  return h + tail + "}";
}

}  // namespace

TEST_CASE("a header of kMaxHeaderTensors zero-size tensors parses, every entry kept under its name", "[cpu]") {
  // The callback parser this replaced rescanned the root object at every entry's end: 129 s for
  // 100000 entries. The test asserts what is read, not how fast (a sanitizer build on a busy
  // machine is 20 times slower); the times of `cnn-ckpt inspect` on such files are in RESULTS.md.
  const size_t n = kMaxHeaderTensors;
  // Metadata, here after the tensors, does not count as one.
  SafetensorsFile f = SafetensorsFile::parse(make_file(zero_size_header(n, R"(,"__metadata__":{"epoch":"3"})")), "zeros");
  CHECK(f.tensors().size() == n);
  CHECK(f.contains("t0"));
  CHECK(f.contains(fmt::format("t{}", n - 1)));
  CHECK(f.info("t50000").bytes() == 0);
  CHECK(f.metadata().at("epoch") == "3");
  // A duplicate among them, the last one, is still found (replacing the last entry: still n).
  const std::string dup = zero_size_header(n - 1, R"(,"t0":{"dtype":"F32","shape":[0],"data_offsets":[0,0]})");
  CHECK_THROWS_WITH(SafetensorsFile::parse(make_file(dup), "zeros"), HAS_PHRASE("duplicate key 't0'"));
}

TEST_CASE("a header declaring more than kMaxHeaderTensors tensors is refused, naming the file, the count and the cap",
          "[cpu]") {
  // Issue 16: 1.5M zero-size entries (90 MB, inside the 10^8-byte header limit) took 22 s in
  // `cnn-ckpt inspect` and 3 GB (bad_alloc, file unnamed, under a 4 GB address-space cap; the
  // app tests run that file). The entries are counted before any is built.
  const std::string over = zero_size_header(kMaxHeaderTensors + 1);
  CHECK_THROWS_WITH(SafetensorsFile::parse(make_file(over), "huge.safetensors"),
                    HAS_PHRASE(fmt::format("huge.safetensors: header declares {} tensors, more than the limit of {} "
                                           "tensors per file (kMaxHeaderTensors",
                                           kMaxHeaderTensors + 1, kMaxHeaderTensors)));
  // Nothing is made of an entry before the count: a bad one, even the first, does not hide it.
  CHECK_THROWS_WITH(SafetensorsFile::parse(make_file("{\"x\":7," + over.substr(1)), "huge.safetensors"),
                    HAS_PHRASE(fmt::format("declares {} tensors", kMaxHeaderTensors + 2)));
  // What is not JSON is still found.
  CHECK_THROWS_WITH(SafetensorsFile::parse(make_file(over.substr(0, over.size() - 1)), "huge.safetensors"),
                    HAS_PHRASE("huge.safetensors: header is not valid JSON"));
}

TEST_CASE("a header within the byte limit cannot make the parser build more than its caps", "[cpu]") {
  // 10^8 bytes of `[],` would be 33M values, ~2 GB once built: every value is counted (numbers
  // here: the same count, and cheap to build under a sanitizer).
  const std::string junk = "[" + [] {
    std::string s;
    for (size_t i = 0; i <= kMaxHeaderJsonValues; ++i) s += i ? ",0" : "0";
    return s;
  }() + "]";
  CHECK_THROWS_WITH(
      SafetensorsFile::parse(make_file(R"({"t":{"dtype":"F32","shape":[0],"data_offsets":[0,0],"junk":)" + junk + "}}"),
                             "junk.safetensors"),
      HAS_PHRASE(fmt::format("junk.safetensors: header holds more than {} JSON values", kMaxHeaderJsonValues)));
  // A shape of 2^22 + 1 dimensions (all 1, so its byte size is fine).
  std::string shape = "1";
  for (size_t i = 0; i < kMaxHeaderJsonValues; ++i) shape += ",1";
  CHECK_THROWS_WITH(SafetensorsFile::parse(make_file(R"({"t":{"dtype":"U8","shape":[)" + shape +
                                                     R"(],"data_offsets":[0,1]}})",
                                                     std::string(1, '\0')),
                                           "rank.safetensors"),
                    HAS_PHRASE("rank.safetensors: header holds more than"));
  // Metadata: a checksum per tensor and our own keys fit; more entries are refused.
  std::string meta = "{";
  for (size_t i = 0; i <= kMaxMetadataEntries; ++i) meta += fmt::format("{}\"k{}\":\"\"", i ? "," : "", i);
  meta += "}";
  CHECK_THROWS_WITH(
      SafetensorsFile::parse(make_file(R"({"__metadata__":)" + meta + "}"), "meta.safetensors"),
      HAS_PHRASE(fmt::format("meta.safetensors: '__metadata__' has {} entries, more than the limit of {}",
                             kMaxMetadataEntries + 1, kMaxMetadataEntries)));
  meta.erase(meta.rfind(','));
  CHECK(SafetensorsFile::parse(make_file(R"({"__metadata__":)" + meta + "}}"), "meta.safetensors").metadata().size() ==
        kMaxMetadataEntries);
}

TEST_CASE("parse_bounded_json keeps values, and refuses deep nesting, too many values, duplicate keys and bad JSON",
          "[cpu]") {
  const JsonLimits limits{3, 100};
  nlohmann::json j = parse_bounded_json(R"({"a":[1,-2,3.5,"x",null,true],"b":{"c":{}}})", limits, "meta");
  CHECK(j["a"][1] == -2);
  CHECK(j["a"][2] == 3.5);
  CHECK(j["a"][3] == "x");
  CHECK(j["b"]["c"].is_object());
  CHECK(parse_bounded_json("7", {0, 1}, "meta") == 7);
  CHECK(parse_bounded_json("[[[]]]", limits, "meta").dump() == "[[[]]]");
  CHECK_THROWS_WITH(parse_bounded_json("[[[[]]]]", limits, "meta"), HAS_PHRASE("meta nests deeper than 3 levels"));
  CHECK_THROWS_WITH(parse_bounded_json(R"({"k":1,"k":2})", limits, "meta"), HAS_PHRASE("meta has the duplicate key 'k'"));
  CHECK_THROWS_WITH(parse_bounded_json(R"({"k":1,)", limits, "meta"), HAS_PHRASE("meta is not valid JSON"));
  CHECK_THROWS_WITH(parse_bounded_json("1 2", limits, "meta"), HAS_PHRASE("meta is not valid JSON"));
  // Values: the containers count, and so does every member and element.
  CHECK(parse_bounded_json(R"({"a":[1,2],"b":{}})", {3, 5}, "meta").size() == 2);
  CHECK_THROWS_WITH(parse_bounded_json(R"({"a":[1,2],"b":{}})", {3, 4}, "meta"),
                    HAS_PHRASE("meta holds more than 4 JSON values"));
  // 300000 levels: an error at level 17, not a stack overflow or a 300000-level value.
  const std::string deep = std::string(300000, '[') + std::string(300000, ']');
  CHECK_THROWS_WITH(parse_bounded_json(deep, {16, 1000}, "meta"), HAS_PHRASE("nests deeper than 16 levels"));
  const std::string deep_objects = [] {
    std::string s;
    for (int i = 0; i < 300000; ++i) s += "{\"a\":";
    return s + "1" + std::string(300000, '}');
  }();
  CHECK_THROWS_WITH(parse_bounded_json(deep_objects, {16, 1000}, "meta"), HAS_PHRASE("nests deeper than 16 levels"));
}

TEST_CASE("parse_bounded_json_members hands over the wanted members one by one and only scans the others", "[cpu]") {
  std::vector<std::pair<std::string, std::string>> taken;
  std::vector<std::string> asked;
  auto wants = [&](const std::string& k) {
    asked.push_back(k);
    return k != "skip";
  };
  auto take = [&](const std::string& k, nlohmann::json&& v) { taken.emplace_back(k, v.dump()); };
  // 6 values are built: 1; [2, {}] is 3; "s" is 1; the skipped member's 5 are not counted.
  parse_bounded_json_members(R"({"a":1,"skip":[[1],{"x":2}],"b":[2,{}],"c":"s"})", {3, 5}, "hdr", wants, take);
  CHECK(asked == std::vector<std::string>{"a", "skip", "b", "c"});
  CHECK(taken == std::vector<std::pair<std::string, std::string>>{{"a", "1"}, {"b", "[2,{}]"}, {"c", "\"s\""}});
  CHECK_THROWS_WITH(parse_bounded_json_members(R"({"a":1,"b":[2,{}],"c":"s"})", {3, 4}, "hdr", wants, take),
                    HAS_PHRASE("hdr holds more than 4 JSON values"));
  // The depth counts the object itself; a skipped member is held to it too.
  CHECK_THROWS_WITH(parse_bounded_json_members(R"({"skip":[[[]]]})", {3, 100}, "hdr", wants, take),
                    HAS_PHRASE("hdr nests deeper than 3 levels"));
  CHECK_THROWS_WITH(parse_bounded_json_members(R"({"a":1,"a":2})", {3, 100}, "hdr", wants, take),
                    HAS_PHRASE("hdr has the duplicate key 'a' (at nesting level 1)"));
  CHECK_THROWS_WITH(parse_bounded_json_members("[1]", {3, 100}, "hdr", wants, take),
                    HAS_PHRASE("hdr is a JSON array, expected an object"));
  CHECK_THROWS_WITH(parse_bounded_json_members("7", {3, 100}, "hdr", wants, take),
                    HAS_PHRASE("hdr is a JSON number, expected an object"));
  CHECK_THROWS_WITH(parse_bounded_json_members(R"({"a":1)", {3, 100}, "hdr", wants, take),
                    HAS_PHRASE("hdr is not valid JSON"));
  taken.clear();
  parse_bounded_json_members("{}", {3, 100}, "hdr", wants, take);
  CHECK(taken.empty());
}

TEST_CASE("open checks the file on disk before reading it", "[cpu]") {
  test::TempDir dir;
  std::string good = python_fixture().serialize();
  std::string path = (dir / "ok.safetensors").string();
  test::write_text_file(path, good);
  CHECK(SafetensorsFile::open(path).names() == python_fixture().names());
  CHECK(SafetensorsFile::open(path).metadata() == python_fixture().metadata());

  std::string cut = (dir / "cut.safetensors").string();
  test::write_text_file(cut, good.substr(0, good.size() - 3));
  CHECK_THROWS_WITH(SafetensorsFile::open(cut), HAS_PHRASE(cut + ": tensor"));
  test::write_text_file(cut, good.substr(0, 100));
  CHECK_THROWS_WITH(SafetensorsFile::open(cut), HAS_PHRASE(cut + ": header length"));
  test::write_text_file(cut, "tiny");
  CHECK_THROWS_WITH(SafetensorsFile::open(cut), HAS_PHRASE("file is 4 bytes"));
  CHECK_THROWS_WITH(SafetensorsFile::open((dir / "missing").string()), HAS_PHRASE("No such file or directory"));
  CHECK_THROWS_WITH(SafetensorsFile::open(dir.path().string()), HAS_PHRASE("is not a regular file"));
  CHECK_THROWS_WITH(SafetensorsFile::open("/dev/zero"), HAS_PHRASE("is not a regular file"));
}

TEST_CASE("a FIFO given as a checkpoint is refused without blocking", "[cpu]") {
  // open(O_RDONLY) of a FIFO waits for a writer: `cnn-ckpt inspect FIFO` and `--resume FIFO` hung.
  // The child opens it under an alarm, so a blocking open fails the test instead of hanging it.
  test::TempDir dir;
  const std::string fifo = (dir / "ckpt.safetensors").string();
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  const pid_t pid = fork();
  if (pid == 0) {
    alarm(10);
    try {
      SafetensorsFile::open(fifo);
    } catch (const Error& e) {
      _exit(std::string(e.what()).find("'" + fifo + "' is not a regular file") != std::string::npos ? 0 : 5);
    }
    _exit(4);
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  INFO("signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0) << " (SIGALRM is " << SIGALRM << ": it blocked)");
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

TEST_CASE("writer rejects duplicate names, wrong sizes and invalid UTF-8", "[cpu]") {
  SafetensorsWriter w;
  float x[2] = {1, 2};
  w.add_f32("x", {2}, x);
  CHECK_THROWS_WITH(w.add_f32("x", {2}, x), HAS_PHRASE("tensor 'x' was added twice"));
  CHECK_THROWS_WITH(w.add("y", DType::f32, {3}, x, 8), HAS_PHRASE("F32 [3] needs 12 bytes, got 8"));
  CHECK_THROWS_WITH(w.add("y", DType::f32, {-1}, x, 8), HAS_PHRASE("negative dimension or overflows"));
  CHECK_THROWS_WITH(w.add("", DType::f32, {2}, x, 8), HAS_PHRASE("must not be empty"));
  CHECK_THROWS_WITH(w.add("__metadata__", DType::f32, {2}, x, 8), HAS_PHRASE("reserved"));
  CHECK_THROWS_WITH(w.add("bad\xff", DType::f32, {2}, x, 8), HAS_PHRASE("is not valid UTF-8"));
  CHECK_THROWS_WITH(w.set_metadata("k", "\xc3"), HAS_PHRASE("is not valid UTF-8"));
  CHECK(w.names() == std::vector<std::string>{"x"});
}

TEST_CASE("write_atomic replaces the file and leaves no temp file", "[cpu]") {
  test::TempDir dir;
  std::string path = (dir / "last.safetensors").string();
  test::write_text_file(path, "old contents");
  SafetensorsWriter w = python_fixture();
  w.write_atomic(path);
  CHECK(test::read_text_file(path) == w.serialize());
  size_t entries = 0;
  for (const auto& e : fs::directory_iterator(dir.path())) entries += e.path().filename() == "last.safetensors" ? 0 : 1;
  CHECK(entries == 0);
}

TEST_CASE("write_atomic leaves the old file intact when it cannot write", "[cpu]") {
  test::TempDir dir;
  std::string path = (dir / "last.safetensors").string();
  std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  test::write_text_file(path, "old contents");
  SafetensorsWriter w = python_fixture();

  SECTION("the temp path cannot be created") {
    fs::create_directory(tmp);
    CHECK_THROWS_WITH(w.write_atomic(path), HAS_PHRASE("cannot write '" + path + "': creating"));
    CHECK(fs::is_directory(tmp));
    CHECK(fs::is_empty(tmp));
  }
  SECTION("the target directory does not exist") {
    std::string inside = (dir / "no-such-dir" / "x.safetensors").string();
    CHECK_THROWS_WITH(w.write_atomic(inside), HAS_PHRASE("No such file or directory"));
    CHECK_FALSE(fs::exists(dir / "no-such-dir"));
  }
  SECTION("the rename fails because the target is a directory") {
    std::string target = (dir / "occupied").string();
    fs::create_directory(target);
    test::write_text_file(fs::path(target) / "keep", "x");
    CHECK_THROWS_WITH(w.write_atomic(target), HAS_PHRASE("renaming over the target"));
    CHECK_FALSE(fs::exists(target + ".tmp-" + std::to_string(::getpid())));
    CHECK(fs::exists(fs::path(target) / "keep"));
  }
  SECTION("a write fails part way (file size limit, like a full disk)") {
    // RLIMIT_FSIZE makes write() fail with EFBIG even for root; SIGXFSZ would kill us otherwise.
    struct rlimit old_limit {};
    REQUIRE(::getrlimit(RLIMIT_FSIZE, &old_limit) == 0);
    auto old_handler = ::signal(SIGXFSZ, SIG_IGN);
    struct rlimit small = old_limit;
    small.rlim_cur = 64;
    REQUIRE(::setrlimit(RLIMIT_FSIZE, &small) == 0);
    std::string message;
    try {
      w.write_atomic(path);
    } catch (const Error& e) {
      message = e.what();
    }
    ::setrlimit(RLIMIT_FSIZE, &old_limit);
    ::signal(SIGXFSZ, old_handler);
    CHECK_THAT(message, HAS_PHRASE("writing '" + tmp + "' failed: File too large"));
  }
  CHECK(test::read_text_file(path) == "old contents");
  CHECK_FALSE(fs::is_regular_file(tmp));
}

TEST_CASE("crc32c matches the known answer and the bitwise reference", "[cpu]") {
  const std::string digits = "123456789";
  CHECK(crc32c(digits.data(), digits.size()) == 0xE3069283u);
  CHECK(crc32c_bitwise(digits.data(), digits.size()) == 0xE3069283u);
  CHECK(compute_checksum(digits.data(), digits.size()) == "e3069283");
  CHECK(crc32c(nullptr, 0) == 0u);
  // 32 bytes of zeros: RFC 3720 B.4 test vector.
  std::vector<uint8_t> zeros(32, 0);
  CHECK(crc32c(zeros.data(), zeros.size()) == 0x8A9136AAu);
  // Continuing over a split buffer equals one pass.
  CHECK(crc32c(digits.data() + 4, 5, crc32c(digits.data(), 4)) == 0xE3069283u);

  std::vector<float> noise = test::random_floats(300, 11);
  const auto* bytes = reinterpret_cast<const uint8_t*>(noise.data());
  for (size_t offset : {0, 1, 3, 7})
    for (size_t n : {0, 1, 7, 8, 9, 15, 16, 17, 63, 64, 65, 1000}) {
      INFO("offset " << offset << " length " << n);
      CHECK(crc32c(bytes + offset, n) == crc32c_bitwise(bytes + offset, n));
    }
  uint32_t v = 0;
  CHECK(parse_checksum_hex("E3069283", v));
  CHECK(v == 0xE3069283u);
  CHECK_FALSE(parse_checksum_hex("e306928", v));
  CHECK_FALSE(parse_checksum_hex("e306928g", v));
  CHECK(checksum_hex(0x0000abcdu) == "0000abcd");
}

TEST_CASE("verify_checksums finds the first tensor whose bytes changed", "[cpu]") {
  SafetensorsWriter w = python_fixture();
  CHECK(w.metadata().at(checksum_key("conv1.weight")) ==
        compute_checksum(w.tensor_bytes("conv1.weight").data(), w.tensor_bytes("conv1.weight").size()));
  std::string bytes = w.serialize();
  ChecksumReport good = verify_checksums(SafetensorsFile::parse(bytes));
  CHECK(good.ok());
  CHECK(good.matched == w.names().size());
  CHECK(good.unchecked.empty());

  SECTION("a flipped data byte") {
    SafetensorsFile f = SafetensorsFile::parse(bytes);
    size_t at = bytes.size() - f.data_size() + f.info("steps.i64").begin + 3;
    bytes[at] = static_cast<char>(bytes[at] ^ 0x10);
    ChecksumReport bad = verify_checksums(SafetensorsFile::parse(bytes, "ckpt"));
    CHECK(bad.first_mismatch == "steps.i64");
    CHECK_THAT(bad.message, HAS_PHRASE("ckpt: tensor 'steps.i64': crc32c of its 32 bytes is"));
  }
  SECTION("a malformed entry, a checksum without a tensor, a tensor without a checksum") {
    SafetensorsWriter v;
    float x[1] = {1};
    v.add_f32("a", {1}, x);
    v.add_f32("b", {1}, x);
    v.set_metadata(checksum_key("a"), "xyz");
    ChecksumReport r = verify_checksums(SafetensorsFile::parse(v.serialize()));
    CHECK(r.first_mismatch == "a");
    CHECK_THAT(r.message, HAS_PHRASE("'xyz' is not 8 hex digits"));
    CHECK(r.unchecked == std::vector<std::string>{"b"});
    v.set_metadata(checksum_key("a"), compute_checksum(x, 4));
    v.set_metadata(checksum_key("ghost"), "00000000");
    r = verify_checksums(SafetensorsFile::parse(v.serialize()));
    CHECK(r.first_mismatch == "ghost");
    CHECK(r.matched == 1);
    CHECK_THAT(r.message, HAS_PHRASE("holds no such tensor"));
  }
}

TEST_CASE("python safetensors loads a file written by the writer", "[cpu]") {
  if (std::system("python3 -c 'import numpy, safetensors.numpy' >/dev/null 2>&1") != 0)
    CNN_SKIP("python3 with numpy and safetensors is not installed");
  test::TempDir dir;
  std::string path = (dir / "fixture.safetensors").string();
  python_fixture().write_atomic(path);
  std::string cmd = std::string("python3 ") + CNN_SOURCE_DIR + "/tools/check_safetensors.py --fixture " + path;
  CHECK(std::system(cmd.c_str()) == 0);
}
