// Tests of `strata bench comm`'s pieces at a world of one (the LocalCommunicator on the CPU
// backend): NCCL-tests' bus factors, the rounding of sizes to whole fp32 shards, the option checks,
// and a real run whose every point is checked, timed and says it is a world of one. Several ranks:
// tests/tools/bench_comm_check.sh under mpirun (label mpi).
#include "bench/comm_bench.h"

#include <gtest/gtest.h>

#include <sstream>
#include <string>

namespace strata::bench {
namespace {

TEST(CommBenchMath, BusFactorsAreNcclTestsOnes) {
  EXPECT_DOUBLE_EQ(comm_bus_factor(CommOp::all_gather, 4), 0.75);
  EXPECT_DOUBLE_EQ(comm_bus_factor(CommOp::reduce_scatter, 4), 0.75);
  EXPECT_DOUBLE_EQ(comm_bus_factor(CommOp::all_to_all, 4), 0.75);
  EXPECT_DOUBLE_EQ(comm_bus_factor(CommOp::all_reduce, 4), 1.5);
  EXPECT_DOUBLE_EQ(comm_bus_factor(CommOp::all_reduce, 2), 1.0);
  EXPECT_DOUBLE_EQ(comm_bus_factor(CommOp::all_gather, 1), 0.0);
}

TEST(CommBenchMath, SizesRoundDownToWholeFp32Shards) {
  EXPECT_EQ(comm_point_bytes(4096, 1), 4096u);
  EXPECT_EQ(comm_point_bytes(4096, 3), 4092u);  // 3 shards of 341 fp32
  EXPECT_EQ(comm_point_bytes(1001, 2), 1000u);
  EXPECT_EQ(comm_point_bytes(11, 3), 0u);
}

TEST(CommBenchOps, NamesRoundTripAndUnknownOnesAreRefused) {
  for (CommOp op : {CommOp::all_gather, CommOp::reduce_scatter, CommOp::all_reduce, CommOp::all_to_all}) {
    StatusOr<CommOp> back = parse_comm_op(comm_op_name(op));
    ASSERT_TRUE(back.is_ok());
    EXPECT_EQ(*back, op);
  }
  StatusOr<CommOp> bad = parse_comm_op("allgather");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().code(), Code::invalid_argument);
  EXPECT_NE(bad.status().message().find("--op allgather: expected all-gather"), std::string::npos);
}

class CommBenchWorldOfOne : public ::testing::Test {
 protected:
  void SetUp() override {
    BackendOptions o;
    o.memory_budget = 64ull << 20;
    StatusOr<std::unique_ptr<Backend>> b = make_backend(o);
    ASSERT_TRUE(b.is_ok()) << b.status().to_string();
    backend_ = std::move(*b);
    comm_ = make_local_communicator(*backend_);
  }
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Communicator> comm_;
};

TEST_F(CommBenchWorldOfOne, EveryPointIsCheckedAndTimedAndTheTableSaysSo) {
  CommBenchOptions o;
  o.sizes = {4096, 6 << 20, 1001};  // 6 MiB: more than one slice of the check's bounce buffer
  o.repeat = 2;
  ASSERT_LE(comm_bench_memory(o, 1), 64ull << 20);
  StatusOr<CommBenchReport> r = run_comm_bench(*backend_, *comm_, o);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->ranks, 1);
  EXPECT_EQ(r->communicator, "local");
  EXPECT_EQ(r->backend, "cpu");
  ASSERT_EQ(r->points.size(), 12u);
  for (const CommPoint& p : r->points) {
    EXPECT_GT(p.seconds.median, 0) << comm_op_name(p.op);
    EXPECT_LE(p.seconds.min, p.seconds.median);
    EXPECT_GE(p.seconds.max, p.seconds.median);
    EXPECT_NEAR(p.algbw_gbps, static_cast<double>(p.bytes) / p.seconds.median / 1e9, 1e-9);
    EXPECT_EQ(p.busbw_gbps, 0.0);  // nothing crosses a link
  }
  EXPECT_EQ(r->points[2].bytes, 1000u);  // 1001 rounded down to whole fp32
  const std::string table = comm_bench_table(*r);
  EXPECT_NE(table.find("bench comm: 1 rank, local communicator on the cpu backend"), std::string::npos) << table;
  EXPECT_NE(table.find("a world of one"), std::string::npos) << table;
  EXPECT_NE(table.find("size 1001 B rounded down to 1000 B"), std::string::npos) << table;
  // One row per point after the column heads: op, bytes and five numbers.
  std::istringstream lines(table.substr(table.find("busbw_GB/s\n") + 11));
  int rows = 0;
  for (std::string op; lines >> op; ++rows) {
    uint64_t bytes = 0;
    double t = 0, lo = 0, hi = 0, alg = 0, bus = -1;
    ASSERT_TRUE(static_cast<bool>(lines >> bytes >> t >> lo >> hi >> alg >> bus)) << table;
    EXPECT_TRUE(parse_comm_op(op).is_ok()) << op;
    EXPECT_EQ(bus, 0.0);
  }
  EXPECT_EQ(rows, 12);
}

TEST_F(CommBenchWorldOfOne, BadOptionsAreInvalidArgument) {
  CommBenchOptions o;
  o.sizes = {4096};
  o.repeat = 0;
  EXPECT_EQ(run_comm_bench(*backend_, *comm_, o).status().code(), Code::invalid_argument);
  o.repeat = 1;
  o.sizes = {3};
  StatusOr<CommBenchReport> small = run_comm_bench(*backend_, *comm_, o);
  EXPECT_EQ(small.status().code(), Code::invalid_argument);
  EXPECT_NE(small.status().message().find("--size 3 B is below 4 x 1 ranks"), std::string::npos)
      << small.status().to_string();
  o.sizes = {4096};
  o.ops.clear();
  EXPECT_EQ(run_comm_bench(*backend_, *comm_, o).status().code(), Code::invalid_argument);
}

}  // namespace
}  // namespace strata::bench
