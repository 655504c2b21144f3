// TraceRecorder (offload/trace.h): spans from several threads, the written file parses as
// trace-event JSON with the expected tracks and events, names survive escaping, stream_span
// brackets the work queued on a CPU backend stream, and write errors name the path.
#include "offload/trace.h"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "offload_test_util.h"
#include "runtime/backend.h"

namespace strata {
namespace {

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  return nlohmann::json::parse(in);  // throws (fails the test) on invalid JSON
}

// tid -> thread_name from the metadata events.
std::map<int, std::string> thread_names(const nlohmann::json& doc) {
  std::map<int, std::string> names;
  for (const auto& e : doc.at("traceEvents")) {
    if (e.at("ph") == "M" && e.at("name") == "thread_name") names[e.at("tid").get<int>()] = e.at("args").at("name");
  }
  return names;
}

std::vector<nlohmann::json> complete_events(const nlohmann::json& doc) {
  std::vector<nlohmann::json> out;
  for (const auto& e : doc.at("traceEvents")) {
    if (e.at("ph") == "X") out.push_back(e);
  }
  return out;
}

TEST(TraceRecorder, SpansFromSeveralThreadsParseWithTheirTracks) {
  test::ScratchDir dir;
  TraceRecorder trace;
  constexpr int kThreads = 4, kSpans = 200;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&trace, t] {
      for (int i = 0; i < kSpans; ++i) {
        const double b = trace.now_us();
        trace.span("worker " + std::to_string(t), "span", b, trace.now_us(), {{"i", i}, {"thread", t}});
        trace.span("shared", "s" + std::to_string(t), b, b + 1.0);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(trace.span_count(), size_t{2 * kThreads * kSpans});
  EXPECT_EQ(trace.tracks().size(), size_t{kThreads + 1});

  const std::string path = dir.file("trace.json");
  ASSERT_TRUE(trace.write(path).is_ok());
  const nlohmann::json doc = read_json(path);
  EXPECT_EQ(doc.at("displayTimeUnit"), "ms");
  bool process_named = false;
  for (const auto& e : doc.at("traceEvents")) {
    EXPECT_EQ(e.at("pid"), 1);
    if (e.at("ph") == "M" && e.at("name") == "process_name") process_named = e.at("args").at("name") == "strata";
  }
  EXPECT_TRUE(process_named);
  const auto names = thread_names(doc);
  ASSERT_EQ(names.size(), size_t{kThreads + 1});
  std::set<std::string> name_set;
  for (const auto& [tid, name] : names) name_set.insert(name);
  for (int t = 0; t < kThreads; ++t) EXPECT_TRUE(name_set.count("worker " + std::to_string(t)));
  EXPECT_TRUE(name_set.count("shared"));

  std::map<std::string, int> per_track;
  std::map<int, int> next_i;  // per worker thread, its spans in its own order
  for (const auto& e : complete_events(doc)) {
    const std::string track = names.at(e.at("tid").get<int>());
    per_track[track]++;
    EXPECT_GE(e.at("dur").get<double>(), 0.0);
    EXPECT_GE(e.at("ts").get<double>(), 0.0);
    if (track != "shared") {
      const int t = e.at("args").at("thread").get<int>();
      EXPECT_EQ(track, "worker " + std::to_string(t));
      EXPECT_EQ(e.at("args").at("i").get<int>(), next_i[t]++);
    } else {
      EXPECT_NEAR(e.at("dur").get<double>(), 1.0, 1e-6);
      EXPECT_FALSE(e.contains("args"));
    }
  }
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(per_track["worker " + std::to_string(t)], kSpans);
  EXPECT_EQ(per_track["shared"], kThreads * kSpans);
  // Nothing but the trace is left in the directory (the temporary file was renamed).
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) files += entry.is_regular_file();
  EXPECT_EQ(files, 1);
}

TEST(TraceRecorder, TracksGetTidsInFirstUseOrder) {
  test::ScratchDir dir;
  TraceRecorder trace;
  trace.span("compute", "a", 0, 1);
  trace.span("d2h", "b", 0, 1);
  trace.span("compute", "c", 5, 3);  // end before begin: zero length at begin
  EXPECT_EQ(trace.tracks(), (std::vector<std::string>{"compute", "d2h"}));
  ASSERT_TRUE(trace.write(dir.file("t.json")).is_ok());
  const nlohmann::json doc = read_json(dir.file("t.json"));
  const auto names = thread_names(doc);
  EXPECT_EQ(names.at(1), "compute");
  EXPECT_EQ(names.at(2), "d2h");
  const auto spans = complete_events(doc);
  ASSERT_EQ(spans.size(), 3u);
  EXPECT_EQ(spans[2].at("ts").get<double>(), 5.0);
  EXPECT_EQ(spans[2].at("dur").get<double>(), 0.0);
}

TEST(TraceRecorder, SpansOnATrackAreReadBackSortedByBegin) {
  TraceRecorder t;
  t.span("compute", "b", 30.0, 45.0);
  t.span("h2d", "x", 5.0, 6.0);
  t.span("compute", "a", 10.0, 12.5);
  const std::vector<std::pair<double, double>> want = {{10.0, 12.5}, {30.0, 45.0}};
  EXPECT_EQ(t.spans_on("compute"), want);
  EXPECT_EQ(t.spans_on("h2d").size(), 1u);
  EXPECT_TRUE(t.spans_on("never used").empty());
}

TEST(TraceRecorder, NamesAreEscaped) {
  test::ScratchDir dir;
  TraceRecorder trace;
  const std::string nasty = "quote\" back\\slash\nnew\ttab \x01 ctl \xc3\xa9 {]},";
  trace.span(nasty, nasty, 1, 2, {{nasty, 7}});
  ASSERT_TRUE(trace.write(dir.file("esc.json")).is_ok());
  const nlohmann::json doc = read_json(dir.file("esc.json"));
  EXPECT_EQ(thread_names(doc).at(1), nasty);
  const auto spans = complete_events(doc);
  ASSERT_EQ(spans.size(), 1u);
  EXPECT_EQ(spans[0].at("name"), nasty);
  EXPECT_EQ(spans[0].at("args").at(nasty), 7);
  // Invalid UTF-8 does not make write fail (it is replaced).
  trace.span("bad", "\xff\xfe", 0, 1);
  EXPECT_TRUE(trace.write(dir.file("bad.json")).is_ok());
  EXPECT_NO_THROW(read_json(dir.file("bad.json")));
}

TEST(TraceRecorder, StreamSpanBracketsTheQueuedWork) {
  test::ScratchDir dir;
  auto backend = make_backend(BackendOptions{.kind = BackendKind::cpu, .memory_budget = 16u << 20});
  ASSERT_TRUE(backend.is_ok()) << backend.status().to_string();
  Backend& b = **backend;
  TraceRecorder trace;
  // Earlier work on the stream: the span must start after it, not when stream_span was called.
  double earlier_end = 0, work_begin = 0, work_end = 0;
  ASSERT_TRUE(b.host_callback(Stream::d2h, [&] {
                 std::this_thread::sleep_for(std::chrono::milliseconds(30));
                 earlier_end = trace.now_us();
               }).is_ok());
  const double called = trace.now_us();
  Status st = trace.stream_span(b, Stream::d2h, "d2h", "copy chunk 3", [&] {
    return b.host_callback(Stream::d2h, [&] {
      work_begin = trace.now_us();
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      work_end = trace.now_us();
    });
  }, {{"chunk", 3}, {"bytes", 4096}});
  ASSERT_TRUE(st.is_ok()) << st.to_string();
  EXPECT_EQ(trace.span_count(), 0u);  // recorded when the stream gets there, not at the call
  ASSERT_TRUE(b.synchronize(Stream::d2h).is_ok());
  ASSERT_EQ(trace.span_count(), 1u);
  ASSERT_TRUE(trace.write(dir.file("s.json")).is_ok());
  const auto spans = complete_events(read_json(dir.file("s.json")));
  ASSERT_EQ(spans.size(), 1u);
  const double ts = spans[0].at("ts").get<double>(), dur = spans[0].at("dur").get<double>();
  EXPECT_EQ(spans[0].at("name"), "copy chunk 3");
  EXPECT_EQ(spans[0].at("args").at("bytes"), 4096);
  EXPECT_GT(ts, called + 20000.0);  // the earlier 30 ms item ran first
  EXPECT_GE(ts, earlier_end);
  EXPECT_LE(ts, work_begin);
  EXPECT_GE(ts + dur, work_end);
  EXPECT_GE(dur, 19000.0);
}

TEST(TraceRecorder, StreamSpanReturnsTheEnqueueErrorAndRecordsNothing) {
  auto backend = make_backend(BackendOptions{.kind = BackendKind::cpu, .memory_budget = 16u << 20});
  ASSERT_TRUE(backend.is_ok()) << backend.status().to_string();
  TraceRecorder trace;
  Status st = trace.stream_span(**backend, Stream::compute, "compute", "x",
                                [] { return error(Code::invalid_argument, "bad copy"); });
  EXPECT_EQ(st.code(), Code::invalid_argument);
  ASSERT_TRUE((*backend)->synchronize(Stream::compute).is_ok());
  EXPECT_EQ(trace.span_count(), 0u);
}

TEST(TraceRecorder, UnwritablePathIsAnErrorNamingIt) {
  TraceRecorder trace;
  trace.span("compute", "a", 0, 1);
  const std::string path = "/nonexistent-strata-dir/sub/trace.json";
  Status st = trace.write(path);
  ASSERT_FALSE(st.is_ok());
  EXPECT_EQ(st.code(), Code::not_found);
  EXPECT_NE(st.message().find(path), std::string::npos) << st.to_string();
  // A directory in the way of the rename.
  test::ScratchDir dir;
  std::filesystem::create_directories(dir.file("adir/inner"));
  st = trace.write(dir.file("adir"));
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find(dir.file("adir")), std::string::npos) << st.to_string();
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) files += entry.is_regular_file();
  EXPECT_EQ(files, 0);  // the temporary file was removed
}

}  // namespace
}  // namespace strata
