// Text from files in messages (issue 16): printable() / quote() escape control characters,
// invalid UTF-8, C1 controls and bidirectional overrides and cut long text, and the importer's
// messages print node and tensor names through them, so a model cannot print fake lines.
#include <gtest/gtest.h>

#include <string>

#include "kiln/kiln.h"
#include "src/core/text.h"
#include "tests/onnx_model_builder.h"

namespace kiln {
namespace {

using test::expect_mentions;
using test::OnnxModelBuilder;

TEST(HostileText, NamesWithControlCharactersAreEscapedInMessages) {
  EXPECT_EQ(printable("a\nkiln: error: fake\x1b[31m\\"), "a\\nkiln: error: fake\\x1b[31m\\\\");
  EXPECT_EQ(printable("caf\xc3\xa9 \xe2\x80\xae x"), "caf\xc3\xa9 \\xe2\\x80\\xae x");  // é kept, RLO escaped
  EXPECT_EQ(printable(std::string(300, 'a'), 10), "aaaaaaaaaa...(300 bytes)");
  EXPECT_EQ(quote("\xff"), "'\\xff'");

  // A node whose output name carries a new line and whose op is unknown.
  OnnxModelBuilder b;
  b.input("x", onnx::TensorProto::FLOAT, {1});
  b.node("Relu", {"x"}, {"bad\nkiln: error: fake"}, "n\x1b[31m1");
  b.node("Frobnicate", {"bad\nkiln: error: fake"}, {"y"}, "frob\nkiln: error: fake line");
  b.output("y", onnx::TensorProto::FLOAT);
  try {
    (void)test::import_model(b);
    ADD_FAILURE() << "no error";
  } catch (const ParseError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("frob\\nkiln: error: fake line"), std::string::npos) << msg;
    EXPECT_EQ(msg.find("\nkiln: error: fake"), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\x1b'), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace kiln
