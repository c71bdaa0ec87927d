#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "checkpoint/safetensors.h"
#include "checkpoint/safetensors_writer.h"
#include "temp_dir.h"

namespace dsv4 {
namespace {

std::vector<uint8_t> file_bytes(const std::string& header, size_t data_bytes) {
  std::vector<uint8_t> b(8 + header.size() + data_bytes, 0);
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) b[i] = static_cast<uint8_t>(n >> (8 * i));
  std::memcpy(&b[8], header.data(), header.size());
  return b;
}

Status parse(const std::vector<uint8_t>& b) { return SafetensorsFile::from_buffer("test.safetensors", b.data(), b.size()).status(); }

TEST(Safetensors, WriterOutputReadsBack) {
  const testing::TempDir tmp;
  const std::string path = tmp.file("rt.safetensors");
  SafetensorsWriter w;
  w.add_f32("a.weight", {2, 3}, {1, 2, 3, 4, 5, 6});
  w.add("b.ids", DType::kI64, {1}, std::vector<uint8_t>(8, 0));
  ASSERT_TRUE(w.write(path).ok());
  auto f = SafetensorsFile::open(path);
  ASSERT_TRUE(f.ok()) << f.status().message();
  const TensorInfo* t = (*f)->find("a.weight");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->dtype, DType::kF32);
  EXPECT_EQ(t->shape, (std::vector<int64_t>{2, 3}));
  float v[6];
  std::memcpy(v, t->data, 24);
  EXPECT_EQ(v[5], 6.0f);
  EXPECT_NE((*f)->find("b.ids"), nullptr);
}

TEST(Safetensors, AcceptsAWellFormedHeader) {
  auto b = file_bytes(R"({"x":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]},"__metadata__":{"format":"pt"}})", 4);
  EXPECT_TRUE(parse(b).ok());
}

TEST(Safetensors, RejectsMalformedHeadersWithClearMessages) {
  struct Case {
    std::vector<uint8_t> bytes;
    const char* expect;
  };
  std::vector<Case> cases = {
      {{1, 2, 3}, "truncated"},
      {file_bytes("{", 0), "not valid JSON"},
      {file_bytes("[]", 0), "not a JSON object"},
      {file_bytes(R"({"x":{"dtype":"Q9","shape":[1],"data_offsets":[0,1]}})", 1), "unsupported dtype"},
      {file_bytes(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 4), "outside"},
      {file_bytes(R"({"x":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8), "do not match"},
      {file_bytes(R"({"x":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4), "bad shape"},
      {file_bytes(R"({"x":{"dtype":"F32","shape":[1]}})", 4), "data_offsets"},
      {file_bytes(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})", 8), "outside"},
  };
  // A header length that points past the end of the file.
  std::vector<uint8_t> big(16, 0);
  big[0] = 0xFF;
  big[1] = 0xFF;
  cases.push_back({big, "exceeds the file"});
  for (const auto& c : cases) {
    Status st = parse(c.bytes);
    ASSERT_FALSE(st.ok()) << c.expect;
    EXPECT_NE(st.message().find(c.expect), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("test.safetensors"), std::string::npos) << st.message();
  }
}

TEST(Safetensors, MissingFileIsNotFound) {
  auto f = SafetensorsFile::open("/nonexistent/dir/model.safetensors");
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace dsv4
