// Network's typed add_* helpers: each builds the same layer as the generic add_layer path with
// the attributes docs/layers.md names (same type, inputs, outputs and attributes; both
// validate), and a helper called with its defaults writes the schema's defaults, so that it
// means what an add_layer call without those attributes means. Every layer type of
// docs/layers.md has a helper (NetworkHelpers.EveryDocumentedTypeHasAHelper).
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <variant>

#include "kiln/network.h"
#include "kiln/plugin.h"
#include "src/ir/op_schema.h"

namespace kiln {
namespace {

using Build = std::function<Layer*(Network&)>;

Tensor* in(Network& n, const std::string& name, DataType type = DataType::kFloat32, Dims dims = {1, 4, 6, 6}) {
  return n.add_input(name, type, dims);
}

bool same_value(const AttrValue& a, const AttrValue& b) {
  if (a.index() != b.index()) return false;
  if (const auto* t = std::get_if<HostTensor>(&a)) {
    const auto& u = std::get<HostTensor>(b);
    return t->type() == u.type() && t->dims() == u.dims() && t->to_double() == u.to_double();
  }
  return std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, HostTensor>) {
          return false;
        } else {
          return x == std::get<T>(b);
        }
      },
      a);
}

// The lines of to_text(network) that describe layers (the order of the inputs' lines depends on
// the order in which a call's arguments were evaluated).
std::string layer_lines(const Network& network) {
  std::istringstream text(to_text(network));
  std::string line, r;
  while (std::getline(text, line)) {
    if (line.rfind("layer ", 0) == 0) r += line + "\n";
  }
  return r;
}

// The helper's layer and the generic one print alike (type, inputs, outputs, attributes) and both
// validate.
void expect_same_layer(const Build& helper, const Build& generic) {
  Network a, b;
  Layer* la = helper(a);
  Layer* lb = generic(b);
  ASSERT_NE(la, nullptr);
  EXPECT_EQ(la->type(), lb->type());
  EXPECT_EQ(layer_lines(a), layer_lines(b));
  EXPECT_FALSE(layer_lines(a).empty());
  for (int i = 0; i < la->num_outputs(); ++i) a.mark_output(la->output(i));
  for (int i = 0; i < lb->num_outputs(); ++i) b.mark_output(lb->output(i));
  EXPECT_NO_THROW(a.validate());
  EXPECT_NO_THROW(b.validate());
}

// Every attribute the helper wrote with its default arguments equals the schema's default
// (required attributes aside).
void expect_schema_defaults(const Build& helper_with_defaults) {
  Network n;
  Layer* l = helper_with_defaults(n);
  const OpSchema* schema = OpSchemaRegistry::instance().find(l->type());
  ASSERT_NE(schema, nullptr) << l->type();
  for (const auto& [name, value] : l->attrs().all()) {
    const AttrSpec* spec = schema->find_attr(name);
    ASSERT_NE(spec, nullptr) << l->type() << " attribute " << name;
    if (spec->required) continue;
    EXPECT_TRUE(same_value(value, spec->default_value)) << l->type() << " attribute " << name;
  }
}

Attributes attrs(std::initializer_list<std::pair<const char*, AttrValue>> list) {
  Attributes a;
  for (const auto& [k, v] : list) a.set(k, v);
  return a;
}

TEST(NetworkHelpers, ParametricReluFusedGemmSplit) {
  expect_same_layer([](Network& n) { return n.add_parametric_relu(in(n, "x"), in(n, "s")); },
                    [](Network& n) {
                      return n.add_layer(kLayerParametricReLU, {in(n, "x"), in(n, "s")}, 1);
                    });
  const std::vector<std::string> program = {"act sigmoid r0 0 0", "binary prod r0 r1"};
  expect_same_layer([&](Network& n) { return n.add_fused_elementwise({in(n, "x")}, program); },
                    [&](Network& n) {
                      return n.add_layer(kLayerFusedElementWise, {in(n, "x")}, 1, attrs({{"program", program}}));
                    });
  expect_same_layer([](Network& n) { return n.add_gemm(in(n, "a"), in(n, "b"), nullptr, 0.5, 2.0, true, false); },
                    [](Network& n) {
                      return n.add_layer(
                          kLayerGemm, {in(n, "a"), in(n, "b")}, 1,
                          attrs({{"alpha", 0.5}, {"beta", 2.0}, {"trans_a", int64_t{1}}, {"trans_b", int64_t{0}}}));
                    });
  expect_schema_defaults([](Network& n) { return n.add_gemm(in(n, "a"), in(n, "b"), in(n, "c")); });
  expect_same_layer(
      [](Network& n) {
        return n.add_split(in(n, "x"), 1, 2, {1, 3});
      },
      [](Network& n) {
        return n.add_layer(kLayerSplit, {in(n, "x")}, 2,
                           attrs({{"axis", int64_t{1}}, {"split", std::vector<int64_t>{1, 3}}}));
      });
  expect_same_layer([](Network& n) { return n.add_split(in(n, "x"), 0, 3); },
                    [](Network& n) {
                      return n.add_layer(kLayerSplit, {in(n, "x")}, 3, attrs({{"axis", int64_t{0}}}));
                    });
  Network n;
  EXPECT_THROW(n.add_split(in(n, "x"), 0, 3, {1, 2}), Error);
}

TEST(NetworkHelpers, ResizePaddingFillExpandTile) {
  ResizeDesc r;
  r.mode = InterpolationMode::kCubic;
  r.coordinate_transformation_mode = "align_corners";
  r.cubic_coeff_a = -0.5;
  r.exclude_outside = true;
  expect_same_layer(
      [&](Network& n) { return n.add_resize(in(n, "x"), nullptr, in(n, "sizes", DataType::kInt64, {4}), r); },
      [](Network& n) {
        return n.add_layer(kLayerResize, {in(n, "x"), nullptr, in(n, "sizes", DataType::kInt64, {4})}, 1,
                           attrs({{"mode", std::string("cubic")},
                                  {"coordinate_transformation_mode", std::string("align_corners")},
                                  {"nearest_mode", std::string("round_prefer_floor")},
                                  {"cubic_coeff_a", -0.5},
                                  {"exclude_outside", int64_t{1}},
                                  {"extrapolation_value", 0.0}}));
      });
  expect_schema_defaults(
      [](Network& n) { return n.add_resize(in(n, "x"), in(n, "scales", DataType::kFloat32, {4}), nullptr); });
  expect_same_layer(
      [](Network& n) {
        return n.add_padding(in(n, "x"), in(n, "p", DataType::kInt64, {8}), nullptr, PaddingMode::kReflect);
      },
      [](Network& n) {
        return n.add_layer(kLayerPadding, {in(n, "x"), in(n, "p", DataType::kInt64, {8})}, 1,
                           attrs({{"mode", std::string("reflect")}}));
      });
  expect_schema_defaults([](Network& n) { return n.add_padding(in(n, "x"), in(n, "p", DataType::kInt64, {8})); });
  const HostTensor seven = HostTensor::from_vector<int32_t>(DataType::kInt32, {1}, {7});
  expect_same_layer(
      [&](Network& n) { return n.add_fill(FillMode::kConstant, {in(n, "shape", DataType::kInt64, {2})}, seven); },
      [&](Network& n) {
        return n.add_layer(kLayerFill, {in(n, "shape", DataType::kInt64, {2})}, 1,
                           attrs({{"mode", std::string("constant")}, {"value", seven}}));
      });
  expect_same_layer(
      [](Network& n) {
        return n.add_fill(FillMode::kRange, {in(n, "a", DataType::kInt64, {}), in(n, "b", DataType::kInt64, {}),
                                             in(n, "c", DataType::kInt64, {})});
      },
      [](Network& n) {
        return n.add_layer(
            kLayerFill,
            {in(n, "a", DataType::kInt64, {}), in(n, "b", DataType::kInt64, {}), in(n, "c", DataType::kInt64, {})}, 1,
            attrs({{"mode", std::string("range")}}));
      });
  expect_same_layer([](Network& n) { return n.add_expand(in(n, "x"), in(n, "s", DataType::kInt64, {4})); },
                    [](Network& n) {
                      return n.add_layer(kLayerExpand, {in(n, "x"), in(n, "s", DataType::kInt64, {4})}, 1);
                    });
  expect_same_layer([](Network& n) { return n.add_tile(in(n, "x"), in(n, "r", DataType::kInt64, {4})); },
                    [](Network& n) {
                      return n.add_layer(kLayerTile, {in(n, "x"), in(n, "r", DataType::kInt64, {4})}, 1);
                    });
}

TEST(NetworkHelpers, NormalizationLrnArgReduceTopK) {
  NormalizationDesc d;
  d.mode = NormalizationMode::kGroup;
  d.num_groups = 2;
  d.epsilon = 1e-3;
  expect_same_layer(
      [&](Network& n) {
        return n.add_normalization(in(n, "x"), in(n, "g", DataType::kFloat32, {4}), in(n, "b", DataType::kFloat32, {4}),
                                   d);
      },
      [](Network& n) {
        return n.add_layer(kLayerNormalization,
                           {in(n, "x"), in(n, "g", DataType::kFloat32, {4}), in(n, "b", DataType::kFloat32, {4})}, 1,
                           attrs({{"mode", std::string("group")},
                                  {"axis", int64_t{-1}},
                                  {"axes", std::vector<int64_t>{0, 2, 3}},
                                  {"num_groups", int64_t{2}},
                                  {"epsilon", 1e-3},
                                  {"normalize_variance", int64_t{1}},
                                  {"p", int64_t{2}}}));
      });
  expect_schema_defaults([](Network& n) { return n.add_normalization(in(n, "x"), nullptr, nullptr, {}); });
  expect_same_layer([](Network& n) { return n.add_lrn(in(n, "x"), 3, 2e-4); },
                    [](Network& n) {
                      return n.add_layer(kLayerLRN, {in(n, "x")}, 1,
                                         attrs({{"size", int64_t{3}}, {"alpha", 2e-4}, {"beta", 0.75}, {"bias", 1.0}}));
                    });
  expect_schema_defaults([](Network& n) { return n.add_lrn(in(n, "x"), 5); });
  expect_same_layer([](Network& n) { return n.add_arg_reduce(in(n, "x"), ArgReduceOp::kMin, 2, false, true); },
                    [](Network& n) {
                      return n.add_layer(kLayerArgReduce, {in(n, "x")}, 1,
                                         attrs({{"op", std::string("min")},
                                                {"axis", int64_t{2}},
                                                {"keep_dims", int64_t{0}},
                                                {"select_last_index", int64_t{1}},
                                                {"one_hot", int64_t{0}}}));
                    });
  expect_schema_defaults([](Network& n) { return n.add_arg_reduce(in(n, "x"), ArgReduceOp::kMax); });
  expect_same_layer([](Network& n) { return n.add_topk(in(n, "x"), in(n, "k", DataType::kInt64, {1}), 1, false); },
                    [](Network& n) {
                      return n.add_layer(
                          kLayerTopK, {in(n, "x"), in(n, "k", DataType::kInt64, {1})}, 2,
                          attrs({{"axis", int64_t{1}}, {"largest", int64_t{0}}, {"sorted", int64_t{1}}}));
                    });
  expect_schema_defaults([](Network& n) { return n.add_topk(in(n, "x"), in(n, "k", DataType::kInt64, {1})); });
}

TEST(NetworkHelpers, IndexingFamily) {
  expect_same_layer([](Network& n) { return n.add_cumsum(in(n, "x"), in(n, "a", DataType::kInt64, {}), true); },
                    [](Network& n) {
                      return n.add_layer(kLayerCumSum, {in(n, "x"), in(n, "a", DataType::kInt64, {})}, 1,
                                         attrs({{"exclusive", int64_t{1}}, {"reverse", int64_t{0}}}));
                    });
  expect_schema_defaults([](Network& n) { return n.add_cumsum(in(n, "x"), in(n, "a", DataType::kInt64, {})); });
  expect_same_layer([](Network& n) { return n.add_trilu(in(n, "x"), nullptr, false); },
                    [](Network& n) {
                      return n.add_layer(kLayerTrilu, {in(n, "x")}, 1, attrs({{"upper", int64_t{0}}}));
                    });
  expect_schema_defaults([](Network& n) { return n.add_trilu(in(n, "x")); });
  expect_same_layer(
      [](Network& n) {
        return n.add_one_hot(in(n, "i", DataType::kInt64, {3}), in(n, "d", DataType::kInt64, {1}),
                             in(n, "v", DataType::kFloat32, {2}), 0);
      },
      [](Network& n) {
        return n.add_layer(
            kLayerOneHot,
            {in(n, "i", DataType::kInt64, {3}), in(n, "d", DataType::kInt64, {1}), in(n, "v", DataType::kFloat32, {2})},
            1, attrs({{"axis", int64_t{0}}}));
      });
  expect_schema_defaults([](Network& n) {
    return n.add_one_hot(in(n, "i", DataType::kInt64, {3}), in(n, "d", DataType::kInt64, {1}),
                         in(n, "v", DataType::kFloat32, {2}));
  });
  expect_same_layer(
      [](Network& n) { return n.add_reverse_sequence(in(n, "x"), in(n, "l", DataType::kInt64, {4}), 0, 1); },
      [](Network& n) {
        return n.add_layer(kLayerReverseSequence, {in(n, "x"), in(n, "l", DataType::kInt64, {4})}, 1,
                           attrs({{"batch_axis", int64_t{0}}, {"time_axis", int64_t{1}}}));
      });
  expect_schema_defaults(
      [](Network& n) { return n.add_reverse_sequence(in(n, "x"), in(n, "l", DataType::kInt64, {4})); });
  expect_same_layer(
      [](Network& n) {
        return n.add_max_unpool(in(n, "x"), in(n, "i", DataType::kInt64), nullptr, {2, 2}, {2, 2});
      },
      [](Network& n) {
        return n.add_layer(kLayerMaxUnpool, {in(n, "x"), in(n, "i", DataType::kInt64)}, 1,
                           attrs({{"kernel", std::vector<int64_t>{2, 2}},
                                  {"strides", std::vector<int64_t>{2, 2}},
                                  {"pads", std::vector<int64_t>{}}}));
      });
  expect_same_layer(
      [](Network& n) {
        return n.add_scatter(in(n, "d"), in(n, "i", DataType::kInt64), in(n, "u"), ScatterMode::kNd, 0,
                             ScatterReductionKind::kMax);
      },
      [](Network& n) {
        return n.add_layer(
            kLayerScatter, {in(n, "d"), in(n, "i", DataType::kInt64), in(n, "u")}, 1,
            attrs({{"mode", std::string("nd")}, {"axis", int64_t{0}}, {"reduction", std::string("max")}}));
      });
  expect_schema_defaults(
      [](Network& n) { return n.add_scatter(in(n, "d"), in(n, "i", DataType::kInt64), in(n, "u")); });
}

TEST(NetworkHelpers, DataDependentLayers) {
  expect_same_layer(
      [](Network& n) {
        return n.add_non_max_suppression(in(n, "b", DataType::kFloat32, {1, 5, 4}),
                                         in(n, "s", DataType::kFloat32, {1, 2, 5}), in(n, "m", DataType::kInt64, {1}),
                                         nullptr, nullptr, true);
      },
      [](Network& n) {
        return n.add_layer(kLayerNonMaxSuppression,
                           {in(n, "b", DataType::kFloat32, {1, 5, 4}), in(n, "s", DataType::kFloat32, {1, 2, 5}),
                            in(n, "m", DataType::kInt64, {1})},
                           2, attrs({{"center_point_box", int64_t{1}}}));
      });
  expect_schema_defaults([](Network& n) {
    return n.add_non_max_suppression(in(n, "b", DataType::kFloat32, {1, 5, 4}),
                                     in(n, "s", DataType::kFloat32, {1, 2, 5}));
  });
  expect_same_layer([](Network& n) { return n.add_unique(in(n, "x"), false, false, 1); },
                    [](Network& n) {
                      return n.add_layer(
                          kLayerUnique, {in(n, "x")}, 5,
                          attrs({{"sorted", int64_t{0}}, {"flatten", int64_t{0}}, {"axis", int64_t{1}}}));
                    });
  expect_schema_defaults([](Network& n) { return n.add_unique(in(n, "x")); });
  expect_same_layer([](Network& n) { return n.add_non_zero(in(n, "x")); },
                    [](Network& n) { return n.add_layer(kLayerNonZero, {in(n, "x")}, 2); });
  const std::vector<std::string> stop = {"a", "the"};
  expect_same_layer(
      [&](Network& n) {
        return n.add_string_normalizer(in(n, "s", DataType::kString, {3}), CaseChangeAction::kUpper, true, stop,
                                       "en_US");
      },
      [&](Network& n) {
        return n.add_layer(kLayerStringNormalizer, {in(n, "s", DataType::kString, {3})}, 2,
                           attrs({{"case_change_action", std::string("UPPER")},
                                  {"is_case_sensitive", int64_t{1}},
                                  {"stopwords", stop},
                                  {"locale", std::string("en_US")}}));
      });
  expect_schema_defaults([](Network& n) { return n.add_string_normalizer(in(n, "s", DataType::kString, {3})); });
}

TEST(NetworkHelpers, MathQuantizeSampling) {
  expect_same_layer(
      [](Network& n) {
        return n.add_einsum({in(n, "a"), in(n, "b")}, "nchw,nchw->nc");
      },
      [](Network& n) {
        return n.add_layer(kLayerEinsum, {in(n, "a"), in(n, "b")}, 1,
                           attrs({{"equation", std::string("nchw,nchw->nc")}}));
      });
  expect_same_layer(
      [](Network& n) {
        return n.add_det(in(n, "x", DataType::kFloat32, {2, 3, 3}));
      },
      [](Network& n) {
        return n.add_layer(kLayerDet, {in(n, "x", DataType::kFloat32, {2, 3, 3})}, 1);
      });
  expect_same_layer(
      [](Network& n) {
        return n.add_bit_shift(in(n, "x", DataType::kUInt8, {4}), in(n, "y", DataType::kUInt8, {4}),
                               BitShiftDirection::kRight);
      },
      [](Network& n) {
        return n.add_layer(kLayerBitShift, {in(n, "x", DataType::kUInt8, {4}), in(n, "y", DataType::kUInt8, {4})}, 1,
                           attrs({{"direction", std::string("right")}}));
      });
  expect_same_layer(
      [](Network& n) {
        return n.add_quantize(in(n, "x"), in(n, "s", DataType::kFloat32, {}), nullptr, 1, 0, DataType::kInt8);
      },
      [](Network& n) {
        return n.add_layer(
            kLayerQuantize, {in(n, "x"), in(n, "s", DataType::kFloat32, {})}, 1,
            attrs({{"axis", int64_t{1}}, {"block_size", int64_t{0}}, {"output_type", std::string("int8")}}));
      });
  expect_schema_defaults([](Network& n) { return n.add_quantize(in(n, "x"), in(n, "s", DataType::kFloat32, {})); });
  expect_same_layer(
      [](Network& n) {
        return n.add_dequantize(in(n, "x", DataType::kInt8), in(n, "s", DataType::kFloat32, {4}),
                                in(n, "z", DataType::kInt8, {4}), 1);
      },
      [](Network& n) {
        return n.add_layer(
            kLayerDequantize,
            {in(n, "x", DataType::kInt8), in(n, "s", DataType::kFloat32, {4}), in(n, "z", DataType::kInt8, {4})}, 1,
            attrs({{"axis", int64_t{1}}, {"block_size", int64_t{0}}}));
      });
  expect_schema_defaults(
      [](Network& n) { return n.add_dequantize(in(n, "x", DataType::kInt8), in(n, "s", DataType::kFloat32, {})); });
  expect_same_layer(
      [](Network& n) {
        return n.add_grid_sample(in(n, "x"), in(n, "g", DataType::kFloat32, {1, 3, 3, 2}), InterpolationMode::kNearest,
                                 GridSamplePadding::kBorder, true);
      },
      [](Network& n) {
        return n.add_layer(kLayerGridSample, {in(n, "x"), in(n, "g", DataType::kFloat32, {1, 3, 3, 2})}, 1,
                           attrs({{"mode", std::string("nearest")},
                                  {"padding_mode", std::string("border")},
                                  {"align_corners", int64_t{1}}}));
      });
  expect_schema_defaults([](Network& n) {
    return n.add_grid_sample(in(n, "x"), in(n, "g", DataType::kFloat32, {1, 3, 3, 2}));
  });
  RoiAlignDesc ra;
  ra.mode = RoiAlignMode::kMax;
  ra.output_height = 2;
  ra.output_width = 3;
  ra.sampling_ratio = 2;
  ra.spatial_scale = 0.5;
  expect_same_layer(
      [&](Network& n) {
        return n.add_roi_align(in(n, "x"), in(n, "r", DataType::kFloat32, {2, 4}), in(n, "i", DataType::kInt64, {2}),
                               ra);
      },
      [](Network& n) {
        return n.add_layer(kLayerRoiAlign,
                           {in(n, "x"), in(n, "r", DataType::kFloat32, {2, 4}), in(n, "i", DataType::kInt64, {2})}, 1,
                           attrs({{"mode", std::string("max")},
                                  {"output_height", int64_t{2}},
                                  {"output_width", int64_t{3}},
                                  {"sampling_ratio", int64_t{2}},
                                  {"spatial_scale", 0.5},
                                  {"coordinate_transformation_mode", std::string("half_pixel")}}));
      });
  expect_schema_defaults([](Network& n) {
    return n.add_roi_align(in(n, "x"), in(n, "r", DataType::kFloat32, {2, 4}), in(n, "i", DataType::kInt64, {2}));
  });
  expect_same_layer(
      [](Network& n) {
        return n.add_max_roi_pool(in(n, "x"), in(n, "r", DataType::kFloat32, {2, 5}), {2, 2}, 0.25);
      },
      [](Network& n) {
        return n.add_layer(kLayerMaxRoiPool, {in(n, "x"), in(n, "r", DataType::kFloat32, {2, 5})}, 1,
                           attrs({{"pooled_shape", std::vector<int64_t>{2, 2}}, {"spatial_scale", 0.25}}));
      });
  expect_schema_defaults([](Network& n) {
    return n.add_max_roi_pool(in(n, "x"), in(n, "r", DataType::kFloat32, {2, 5}), {2, 2});
  });
}

TEST(NetworkHelpers, Rnn) {
  RNNDesc d;
  d.cell = RNNCell::kGru;
  d.hidden_size = 8;
  d.direction = RNNDirection::kBidirectional;
  d.activations = {"sigmoid", "tanh", "sigmoid", "tanh"};
  d.linear_before_reset = true;
  auto inputs = [](Network& n) {
    return std::vector<Tensor*>{in(n, "X", DataType::kFloat32, {5, 2, 3}),
                                in(n, "W", DataType::kFloat32, {2, 24, 3}),
                                in(n, "R", DataType::kFloat32, {2, 24, 8}),
                                nullptr,
                                nullptr,
                                nullptr};
  };
  expect_same_layer([&](Network& n) { return n.add_rnn(inputs(n), d); },
                    [&](Network& n) {
                      auto ins = inputs(n);
                      ins.resize(3);
                      return n.add_layer(kLayerRNN, ins, 2,
                                         attrs({{"cell", std::string("gru")},
                                                {"hidden_size", int64_t{8}},
                                                {"direction", std::string("bidirectional")},
                                                {"activations", d.activations},
                                                {"clip", 0.0},
                                                {"linear_before_reset", int64_t{1}},
                                                {"input_forget", int64_t{0}},
                                                {"layout", int64_t{0}}}));
                    });
  RNNDesc lstm;
  lstm.hidden_size = 4;
  lstm.activations = {"sigmoid", "tanh", "tanh"};
  expect_schema_defaults([&](Network& n) { return n.add_rnn(inputs(n), lstm); });
  Network n;
  EXPECT_EQ(n.add_rnn(inputs(n), lstm)->num_outputs(), 3);  // lstm: Y, Y_h, Y_c
}

// A plugin of the built-in registry (the first that its example fields create), added through
// the member and through the free function of plugin.h.
TEST(NetworkHelpers, PluginMemberIsTheFreeFunction) {
  std::unique_ptr<Plugin> plugin;
  for (const auto& info : PluginRegistry::instance().list()) {
    const PluginCreator* c = PluginRegistry::instance().find(info.name, info.version, info.plugin_namespace);
    if (!c) continue;
    try {
      plugin = c->create("p", PluginRegistry::instance().resolve_fields(*c, c->example_fields(), "test"));
    } catch (const Error&) {
      continue;
    }
    if (plugin) break;
  }
  if (!plugin) GTEST_SKIP() << "no built-in plugin";
  expect_same_layer([&](Network& n) { return n.add_plugin({in(n, "x")}, *plugin, "p"); },
                    [&](Network& n) { return add_plugin(n, {in(n, "x")}, *plugin, "p"); });
}

// Every layer type of docs/layers.md's table has a helper: the table's types are the ones the
// tests above cover plus those of the older helpers.
TEST(NetworkHelpers, EveryDocumentedTypeHasAHelper) {
  std::ifstream f(std::string(KILN_SOURCE_DIR) + "/docs/layers.md");
  ASSERT_TRUE(f) << "docs/layers.md";
  std::set<std::string> documented;
  const std::regex row(R"(^\| ([A-Za-z]+) \|)");
  std::string line;
  bool in_table = false;  // the layer table: from its header row to the first line outside it
  while (std::getline(f, line)) {
    if (line.rfind("| type | inputs |", 0) == 0) {
      in_table = true;
      continue;
    }
    if (in_table && line.rfind("|", 0) != 0) break;
    std::smatch m;
    if (in_table && std::regex_search(line, m, row)) documented.insert(m[1]);
  }
  // The helper of each type (network.h); the test of each is above or in the tests of the
  // older helpers.
  const std::set<std::string> with_helper = {kLayerConstant,
                                             kLayerIdentity,
                                             kLayerCast,
                                             kLayerConvolution,
                                             kLayerDeconvolution,
                                             kLayerPooling,
                                             kLayerActivation,
                                             kLayerParametricReLU,
                                             kLayerScale,
                                             kLayerElementWise,
                                             kLayerFusedElementWise,
                                             kLayerUnary,
                                             kLayerMatrixMultiply,
                                             kLayerGemm,
                                             kLayerShuffle,
                                             kLayerConcatenation,
                                             kLayerSplit,
                                             kLayerSlice,
                                             kLayerGather,
                                             kLayerResize,
                                             kLayerSoftMax,
                                             kLayerReduce,
                                             kLayerPadding,
                                             kLayerSelect,
                                             kLayerShape,
                                             kLayerFill,
                                             kLayerExpand,
                                             kLayerTile,
                                             kLayerNormalization,
                                             kLayerLRN,
                                             kLayerArgReduce,
                                             kLayerTopK,
                                             kLayerCumSum,
                                             kLayerTrilu,
                                             kLayerOneHot,
                                             kLayerReverseSequence,
                                             kLayerMaxUnpool,
                                             kLayerNonMaxSuppression,
                                             kLayerUnique,
                                             kLayerEinsum,
                                             kLayerDet,
                                             kLayerBitShift,
                                             kLayerScatter,
                                             kLayerQuantize,
                                             kLayerDequantize,
                                             kLayerGridSample,
                                             kLayerRoiAlign,
                                             kLayerMaxRoiPool,
                                             kLayerRNN,
                                             kLayerStringNormalizer,
                                             kLayerNonZero,
                                             kLayerPlugin};
  EXPECT_GE(documented.size(), 50u);
  for (const auto& type : documented) EXPECT_TRUE(with_helper.count(type)) << type << " has no add_* helper";
}

}  // namespace
}  // namespace kiln
