// Placement's optimizer pieces (model/plan/placement.h): every chunk's state cut into pieces of at most
// sub_group_size parameters (and the padding before the next field), at tensor starts or whole
// 8-bit blocks inside a tensor, covering each
// chunk exactly; the pipeline's options built from them (one image per piece, labelled), so the
// staging a run pins is bounded by the piece size, not by the largest chunk.
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "kernels/cpu/adam8bit.h"
#include "model/net/model_config.h"
#include "model/net/param_layout.h"
#include "model/plan/placement.h"
#include "tests/model/model_run.h"

namespace strata::model {
namespace {

using testing::expect_value;

ParamLayout masters_of(const std::string& preset) {
  return build_param_layout(expect_value(model_preset(preset)), sizeof(float)).value();
}

// The pieces cover every chunk exactly, in order; no piece exceeds the cap but by padding (a cut
// before a field keeps the padding before it, under kFieldAlignment elements; the chunk's end
// padding goes to its last piece); a cut inside a tensor is a whole number of 8-bit blocks from its
// start; each piece's scales are the blocks of the tensor elements it holds.
void expect_valid_pieces(const ParamLayout& masters, const std::vector<StatePiece>& pieces, uint64_t cap) {
  std::vector<uint64_t> chunk_scales(masters.chunks.size(), 0);
  for (const ParamSpec& p : masters.params) chunk_scales[p.chunk] += kernels::adam8bit_blocks(p.elements);
  size_t i = 0;
  for (size_t c = 0; c < masters.chunks.size(); ++c) {
    const uint64_t slots = masters.chunks[c].bytes / sizeof(float);
    uint64_t at = 0, scale_at = 0;
    for (; i < pieces.size() && pieces[i].chunk == c; ++i) {
      const StatePiece& piece = pieces[i];
      EXPECT_EQ(piece.element_begin, at) << "chunk " << c;
      EXPECT_EQ(piece.scale_begin, scale_at) << "chunk " << c;
      EXPECT_GT(piece.elements(), 0u);
      EXPECT_GT(piece.scales(), 0u);
      if (piece.element_end != slots) EXPECT_LT(piece.elements(), cap + kFieldAlignment) << "chunk " << c;
      at = piece.element_end;
      scale_at = piece.scale_end;
      // The cut after this piece: at a tensor start, or inside one on a block boundary, with the
      // scales counted to it.
      if (piece.element_end == slots) continue;
      uint64_t scales_before = 0;
      bool on_boundary = false;
      for (const ParamSpec& p : masters.params) {
        if (size_t(p.chunk) != c) continue;
        const uint64_t begin = p.offset / sizeof(float), end = begin + p.elements;
        if (piece.element_end >= end) {
          scales_before += kernels::adam8bit_blocks(p.elements);
        } else if (piece.element_end >= begin) {
          const uint64_t inside = piece.element_end - begin;
          on_boundary = inside % kernels::kAdam8bitBlock == 0;
          scales_before += inside / kernels::kAdam8bitBlock;
        }
      }
      EXPECT_TRUE(on_boundary) << "chunk " << c << " cut at slot " << piece.element_end;
      EXPECT_EQ(piece.scale_end, scales_before) << "chunk " << c;
    }
    EXPECT_EQ(at, slots) << "chunk " << c << " is not covered";
    EXPECT_EQ(scale_at, chunk_scales[c]) << "chunk " << c;
  }
  EXPECT_EQ(i, pieces.size());
}

TEST(OptimizerPieces, ChunksNoLargerThanTheCapAreOnePiece) {
  const ParamLayout masters = masters_of("gpt2-tiny");
  const std::vector<StatePiece> pieces = optimizer_state_pieces(masters, uint64_t(1) << 24);
  ASSERT_EQ(pieces.size(), masters.chunks.size());
  expect_valid_pieces(masters, pieces, uint64_t(1) << 24);
}

TEST(OptimizerPieces, SmallCapsCutTensorsOnBlockBoundaries) {
  const ParamLayout masters = masters_of("gpt2-tiny");
  for (uint64_t cap : {uint64_t(256), uint64_t(1000), uint64_t(4096), uint64_t(5000)}) {
    SCOPED_TRACE(cap);
    const std::vector<StatePiece> pieces = optimizer_state_pieces(masters, cap);
    EXPECT_GT(pieces.size(), masters.chunks.size());
    expect_valid_pieces(masters, pieces, cap);
  }
}

// Across ranks with 8-bit moments: each rank's pieces (rank_state_pieces), put together chunk by
// chunk in rank order, are valid pieces of the whole state -- every element and every block scale
// once, each cut on a block boundary with the scales counted to it -- for GPT-2 (whose 64-wide norms
// would cut blocks at 256-byte alignment) and LLaMA, at 2, 3 and 4 ranks, whole chunks and pieces.
TEST(OptimizerPieces, RanksPiecesTogetherAreTheWholeStateWithTheirBlockScales) {
  for (const char* preset : {"gpt2-tiny", "llama-tiny"}) {
    const ModelConfig config = expect_value(model_preset(preset));
    const ParamLayout layout = build_param_layout(config, 2).value();
    const ParamLayout masters = masters_of(preset);
    for (int ranks : {2, 3, 4}) {
      ASSERT_EQ(q8_block_split(layout, ranks), std::nullopt) << preset << " at " << ranks << " ranks";
      for (uint64_t cap : {uint64_t(1) << 24, uint64_t(5000)}) {
        SCOPED_TRACE(::testing::Message() << preset << ", " << ranks << " ranks, cap " << cap);
        std::vector<std::vector<StatePiece>> of(static_cast<size_t>(ranks));
        for (int r = 0; r < ranks; ++r) of[size_t(r)] = rank_state_pieces(layout, masters, cap, ranks, r);
        std::vector<StatePiece> merged;
        for (size_t c = 0; c < masters.chunks.size(); ++c)
          for (const std::vector<StatePiece>& mine : of)
            for (const StatePiece& p : mine)
              if (p.chunk == c) merged.push_back(p);
        expect_valid_pieces(masters, merged, cap);
      }
    }
  }
}

// A layout whose fused tensors put a cut inside a block (LLaMA 24 wide with an MLP of 200: gate is
// 4800 elements, so up starts 192 elements into a block, and the cut at 2 ranks falls in it) is
// named by q8_block_split.
TEST(OptimizerPieces, ACutInsideAnEightBitBlockIsNamed) {
  ModelConfig config = expect_value(model_preset("llama-tiny"));
  config.dim = 24;
  config.n_head = 2;
  config.n_kv_head = 2;
  config.ffn_hidden = 200;
  const ParamLayout layout = build_param_layout(config, 2).value();
  const std::optional<std::string> split = q8_block_split(layout, 2);
  ASSERT_TRUE(split.has_value());
  EXPECT_NE(split->find("up_proj"), std::string::npos) << *split;
}

// llama-3b: a 394 M-parameter embedding and 101 M-parameter layers. With the default cap every
// staging buffer holds at most 2^24 parameters' state (201 MB with fp32 moments), so four of them
// pin under 1 GB where whole chunks would pin 19 GB.
TEST(OptimizerPieces, Llama3bStagingIsBoundedByThePiece) {
  const ParamLayout masters = masters_of("llama-3b");
  TrainOptions o;
  o.optimizer_home = Tier::nvme;
  o.optimizer_staging = 4;
  const std::vector<StatePiece> pieces = optimizer_state_pieces(masters, o.sub_group_size);
  expect_valid_pieces(masters, pieces, o.sub_group_size);
  const uint64_t embedding = masters.chunks[0].bytes / sizeof(float);
  EXPECT_GT(embedding, 390'000'000u);
  const size_t embedding_pieces =
      size_t(std::count_if(pieces.begin(), pieces.end(), [](const StatePiece& p) { return p.chunk == 0; }));
  EXPECT_EQ(embedding_pieces, size_t((embedding + o.sub_group_size - 1) / o.sub_group_size));

  const OptimizerPipelineOptions po = optimizer_state_options(masters, o);
  ASSERT_EQ(po.fp32_elements.size(), pieces.size());
  ASSERT_EQ(po.labels.size(), pieces.size());
  EXPECT_EQ(po.labels[0], "chunk 0 piece 1/" + std::to_string(embedding_pieces));
  const uint64_t pinned = optimizer_pipeline_pinned_bytes(po);
  EXPECT_LE(pinned, 4 * (12 * o.sub_group_size + (64 << 10)));
  EXPECT_GT(pinned, 4 * 12 * (o.sub_group_size - 4096));
  // NVMe: every piece's image, the whole model's masters and moments (12 bytes per parameter).
  uint64_t params = 0;
  for (const ParamSpec& p : masters.params) params += p.elements;
  EXPECT_GE(optimizer_pipeline_nvme_bytes(po), 12 * params);
  EXPECT_LE(optimizer_pipeline_nvme_bytes(po), 12 * params + pieces.size() * 8192);

  o.adam_states = AdamStates::q8;
  const OptimizerPipelineOptions q8 = optimizer_state_options(masters, o);
  for (size_t i = 0; i < pieces.size(); ++i) EXPECT_EQ(q8.scale_count[i], pieces[i].scales());
}

}  // namespace
}  // namespace strata::model
