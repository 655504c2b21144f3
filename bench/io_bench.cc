// `strata bench io` (see io_bench.h): strata's engine and fio, point by point on one file.
#include "bench/io_bench.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <memory>
#include <random>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bench/bench_util.h"
#include "offload/nvme_store.h"
#include "offload/run_dir.h"
#include "runtime/mutex.h"
#include "runtime/pinned_pool.h"
#include "runtime/units.h"

namespace strata::bench {
namespace {

using Clock = std::chrono::steady_clock;

double percentile(std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  size_t i = std::min(sorted.size() - 1, static_cast<size_t>(q * static_cast<double>(sorted.size())));
  return sorted[i];
}

IoSample median_sample(const std::vector<IoSample>& runs) {
  std::vector<double> g, i, p50, p99;
  for (const IoSample& s : runs) {
    g.push_back(s.gbps);
    i.push_back(s.iops);
    p50.push_back(s.p50_us);
    p99.push_back(s.p99_us);
  }
  return IoSample{median(g), median(i), median(p50), median(p99)};
}

// Buffers for `count` blocks of `block` bytes from a pinned pool, registered with the engine.
struct BlockBuffers {
  std::unique_ptr<PinnedPool> pool;
  PinnedBuffer memory;
};

StatusOr<BlockBuffers> make_buffers(IoEngine& engine, uint64_t bytes, bool huge_pages) {
  BlockBuffers b;
  STRATA_ASSIGN_OR_RETURN(b.pool, PinnedPool::create(PinnedPoolOptions{.slab_bytes = bytes, .allow_cuda = false, .huge_pages = huge_pages}));
  register_pinned_pool(engine, *b.pool);
  STRATA_ASSIGN_OR_RETURN(b.memory, b.pool->acquire(bytes));
  b.pool->set_slab_listener(nullptr);
  return b;
}

// What a strata_pass() shares with its completion callbacks, which run on the engine's threads.
struct StrataPassState {
  Mutex mu;
  CondVar slot_freed;
  std::deque<uint32_t> free_slots GUARDED_BY(mu);
  std::vector<double> latencies_us GUARDED_BY(mu);
  Status first_error GUARDED_BY(mu);
};

// One sequential pass over [0, size) in `block` requests, `qd` of them in flight.
StatusOr<IoSample> strata_pass(IoEngine& engine, FileId file, IoOp mode, uint64_t size, uint64_t block, uint32_t qd,
                               std::byte* buffers) {
  StrataPassState st;
  // A slot's start time is written before its submit and read by its callback: ordered by the submit.
  std::vector<Clock::time_point> started(qd);
  const uint64_t blocks = size / block;
  {
    MutexLock lock(st.mu);
    for (uint32_t i = 0; i < qd; i++) st.free_slots.push_back(i);
    st.latencies_us.reserve(blocks + 1);
  }
  const Clock::time_point t0 = Clock::now();
  for (uint64_t b = 0; b < blocks; b++) {
    uint32_t slot;
    {
      MutexLock lock(st.mu);
      while (st.free_slots.empty()) st.slot_freed.wait(st.mu);
      if (!st.first_error.is_ok()) break;
      slot = st.free_slots.front();
      st.free_slots.pop_front();
    }
    started[slot] = Clock::now();
    IoRequest r{mode, file, b * block, block, buffers + static_cast<uint64_t>(slot) * block};
    Status s = engine.submit(r, [&st, &started, slot](const Status& done) {
      auto now = Clock::now();
      MutexLock lock(st.mu);
      st.latencies_us.push_back(std::chrono::duration<double, std::micro>(now - started[slot]).count());
      if (!done.is_ok() && st.first_error.is_ok()) st.first_error = done;
      st.free_slots.push_back(slot);
      st.slot_freed.notify_all();
    });
    if (!s.is_ok()) {
      MutexLock lock(st.mu);
      st.free_slots.push_back(slot);
      if (st.first_error.is_ok()) st.first_error = s;
      break;
    }
  }
  MutexLock lock(st.mu);
  while (st.free_slots.size() != qd) st.slot_freed.wait(st.mu);
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  if (!st.first_error.is_ok()) return st.first_error;
  std::sort(st.latencies_us.begin(), st.latencies_us.end());
  const double bytes = static_cast<double>(blocks * block);
  return IoSample{bytes / seconds / 1e9, static_cast<double>(blocks) / seconds, percentile(st.latencies_us, 0.50),
                  percentile(st.latencies_us, 0.99)};
}

// fio's buffers on the same kind of pages as strata's: with strata on huge pages, fio gets
// hugetlbfs pages (--iomem=mmaphuge) when a hugetlbfs mount has enough free 2 MiB pages for the
// largest block x queue depth of the sweep; otherwise fio keeps its default malloc'd 4 KiB pages
// and `note` says the comparison is not like-for-like and how to make it so.
std::string choose_fio_iomem(const IoBenchOptions& o, std::string* note) {
  if (!o.huge_pages) return "malloc";
  uint64_t needed = 0;
  for (uint64_t b : o.blocks)
    for (uint32_t q : o.queue_depths) needed = std::max(needed, b * q);
  uint64_t free_bytes = 0, page_bytes = 0;
  if (std::FILE* f = std::fopen("/proc/meminfo", "r")) {
    char line[256];
    while (std::fgets(line, sizeof line, f)) {
      unsigned long long v = 0;
      if (std::sscanf(line, "HugePages_Free: %llu", &v) == 1) free_bytes = v;
      if (std::sscanf(line, "Hugepagesize: %llu kB", &v) == 1) page_bytes = v * 1024;
    }
    std::fclose(f);
  }
  free_bytes *= page_bytes;
  std::string mount;
  if (std::FILE* f = std::fopen("/proc/mounts", "r")) {
    char dev[256], dir[1024], type[64];
    while (mount.empty() && std::fscanf(f, "%255s %1023s %63s %*[^\n]", dev, dir, type) == 3)
      if (std::string(type) == "hugetlbfs") mount = dir;
    std::fclose(f);
  }
  if (!mount.empty() && free_bytes >= needed) return fmt::format("mmaphuge:{}/strata-fio-{}", mount, ::getpid());
  *note = fmt::format(
      "fio's buffers are on 4 KiB pages and strata's on huge pages, so this is not like-for-like (O_DIRECT "
      "transfers from 4 KiB pages need more segments): for fio on huge pages reserve {} of hugetlbfs pages "
      "(echo {} > /proc/sys/vm/nr_hugepages; mount -t hugetlbfs none /dev/hugepages), or run with --pages 4k",
      format_size(needed), (needed + (2 << 20) - 1) / (2 << 20));
  return "malloc";
}

StatusOr<IoSample> fio_pass(const IoBenchOptions& o, const std::string& file, const std::string& iomem, IoOp mode,
                            uint64_t size, uint64_t block, uint32_t qd) {
  std::string cmd = fmt::format(
      "{} --name=strata-peer --filename='{}' --rw={} --bs={} --iodepth={} --direct=1 --ioengine=io_uring "
      "--fixedbufs=1 --registerfiles=1 --iomem={} --size={} --numjobs=1 --output-format=json 2>/dev/null",
      o.fio_binary, file, mode == IoOp::read ? "read" : "write", block, qd, iomem, size);
  STRATA_ASSIGN_OR_RETURN(std::string out, run_command(cmd));
  nlohmann::json j = nlohmann::json::parse(out, nullptr, false);
  if (j.is_discarded() || !j.contains("jobs") || j["jobs"].empty())
    return error(Code::io_error, "fio printed no JSON result for `{}`", cmd);
  const nlohmann::json& side = j["jobs"][0][mode == IoOp::read ? "read" : "write"];
  const nlohmann::json& pct = side["clat_ns"]["percentile"];
  return IoSample{side["bw_bytes"].get<double>() / 1e9, side["iops"].get<double>(),
                  pct.value("50.000000", 0.0) / 1e3, pct.value("99.000000", 0.0) / 1e3};
}

// Writes `size` bytes of random data to `path` (so reads read real blocks, and fio finds the
// file laid out), through `engine`.
Status prepare_file(IoEngine& engine, const std::string& path, uint64_t size) {
  STRATA_ASSIGN_OR_RETURN(FileId f, engine.open(path, OpenOptions{.create = true, .direct = true}));
  Status s = engine.allocate(f, 0, size);
  const uint64_t chunk = 8 << 20;
  STRATA_ASSIGN_OR_RETURN(BlockBuffers buf, make_buffers(engine, chunk, true));
  std::mt19937_64 rng(1);
  for (uint64_t i = 0; i < chunk / 8; i++) {
    uint64_t v = rng();
    std::memcpy(buf.memory.data() + i * 8, &v, 8);
  }
  for (uint64_t off = 0; s.is_ok() && off < size; off += chunk)
    s = engine.run({IoOp::write, f, off, std::min(chunk, size - off), buf.memory.data()});
  (void)engine.unregister_memory({buf.memory.data(), chunk});
  Status c = engine.close(f);
  return s.is_ok() ? c : s;
}

// One point of the striping comparison: the NVMe store over `paths`, `size` bytes written (and,
// for reads, read back), stripe unit = block.
StatusOr<double> store_pass(const IoEngineConfig& ec, const std::vector<std::string>& paths, IoOp mode,
                            uint64_t size) {
  STRATA_ASSIGN_OR_RETURN(StoreBandwidth bw,
                          measure_store_bandwidth(ec, paths, size, ec.shape.block_bytes, mode == IoOp::read));
  return mode == IoOp::read ? bw.read_gbps : bw.write_gbps;
}

}  // namespace

StatusOr<StoreBandwidth> measure_store_bandwidth(const IoEngineConfig& ec, const std::vector<std::string>& paths,
                                                 uint64_t size, uint64_t stripe_unit, bool read_back) {
  STRATA_ASSIGN_OR_RETURN(IoEngineChoice choice, make_io_engine(ec, paths));
  NvmeStoreOptions so;
  so.paths = paths;
  so.capacity = size;
  so.stripe_unit = stripe_unit;
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<NvmeStore> store, NvmeStore::create(*choice.engine, so));
  const uint64_t extent = std::min<uint64_t>(64 << 20, size);
  const uint64_t count = size / extent;
  STRATA_ASSIGN_OR_RETURN(BlockBuffers buf, make_buffers(*choice.engine, extent * std::min<uint64_t>(count, 4), true));
  std::vector<ExtentId> ids;
  for (uint64_t i = 0; i < count; i++) {
    STRATA_ASSIGN_OR_RETURN(ExtentId id, store->allocate(fmt::format("bench{}", i), extent));
    ids.push_back(id);
  }
  auto pass = [&](IoOp op) -> StatusOr<double> {  // four extents in flight
    const Clock::time_point t0 = Clock::now();
    std::deque<ExtentIo> inflight;
    for (uint64_t i = 0; i < count; i++) {
      if (inflight.size() == 4) {
        STRATA_RETURN_IF_ERROR(store->finish(inflight.front()));
        inflight.pop_front();
      }
      std::byte* b = buf.memory.data() + (i % 4) * extent;
      StatusOr<ExtentIo> io = op == IoOp::write ? store->begin_write(ids[i], b) : store->begin_read(ids[i], b);
      if (!io.is_ok()) return io.status();
      inflight.push_back(std::move(*io));
    }
    for (ExtentIo& io : inflight) STRATA_RETURN_IF_ERROR(store->finish(io));
    return static_cast<double>(count * extent) / std::chrono::duration<double>(Clock::now() - t0).count() / 1e9;
  };
  StoreBandwidth bw;
  bw.engine = std::string(choice.engine->name());
  bw.fallback_reason = choice.fallback_reason;
  bw.bytes = count * extent;
  Status s = Status::ok();
  StatusOr<double> written = pass(IoOp::write);  // reads need valid extents
  if (written.is_ok()) bw.write_gbps = *written;
  else s = written.status();
  if (s.is_ok() && read_back) {
    StatusOr<double> read = pass(IoOp::read);
    if (read.is_ok()) bw.read_gbps = *read;
    else s = read.status();
  }
  (void)choice.engine->unregister_memory({buf.memory.data(), buf.memory.size()});
  if (!s.is_ok()) return s;
  return bw;
}

StatusOr<IoBenchReport> run_io_bench(const IoBenchOptions& o) {
  if (o.paths.empty()) return Status(Code::invalid_argument, "bench io needs --path DIR");
  for (const std::string& path : o.paths) {
    struct stat st{};
    if (::stat(path.c_str(), &st) != 0)
      return errno_status(errno, fmt::format("--path {}", path)).with_context("bench io needs existing directories");
    if (!S_ISDIR(st.st_mode))
      return error(Code::invalid_argument, "--path {} is not a directory; give the directory to write the test file in",
                   path);
  }
  if (o.repeat < 1) return error(Code::invalid_argument, "--repeat must be >= 1 (got {})", o.repeat);
  for (uint64_t b : o.blocks)
    if (b == 0 || b % 4096 != 0 || b > o.size)
      return error(Code::invalid_argument, "--block {}: blocks must be multiples of 4 KiB no larger than --size {}",
                   format_size(b), format_size(o.size));
  IoBenchReport report;
  // The test file lives in a run directory of its own, as a training run's swap files do (mode
  // 0700, locked while the bench runs): a killed bench leaves a directory `strata clean` removes,
  // and two benches on one path do not write each other's file.
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<RunDir> run, RunDir::create(o.paths[0]));
  report.file = run->file("swap-bench-io.bin");
  report.size = o.size / (1 << 20) * (1 << 20);
  if (report.size == 0) return Status(Code::invalid_argument, "--size must be at least 1 MiB");

  IoEngineConfig ec{o.engine, IoShape{8 << 20, 8}};
  STRATA_ASSIGN_OR_RETURN(IoEngineChoice prep, make_io_engine(ec, {o.paths[0]}));
  report.engine = std::string(prep.engine->name());
  report.huge_pages = o.huge_pages;
  report.fallback_reason = prep.fallback_reason;
  Status prepared = prepare_file(*prep.engine, report.file, report.size);
  if (!prepared.is_ok()) return prepared.with_context("bench io: writing the test file");

  if (o.fio) {
    auto v = run_command(o.fio_binary + " --version 2>/dev/null");
    if (v.is_ok()) report.fio_version = std::string(v->substr(0, v->find('\n')));
    else report.fio_missing = fmt::format("`{} --version` failed: fio is not installed (apt-get install fio)", o.fio_binary);
    report.fio_iomem = choose_fio_iomem(o, &report.fio_iomem_note);
  } else {
    report.fio_missing = "--no-fio";
  }

  const size_t total = o.modes.size() * o.blocks.size() * o.queue_depths.size() * (o.paths.size() > 1 ? 2 : 1);
  size_t done = 0;
  Status failure;
  for (IoOp mode : o.modes) {
    for (uint64_t block : o.blocks) {
      for (uint32_t qd : o.queue_depths) {
        std::string what = fmt::format("{} {} QD{}", io_op_name(mode), format_size(block), qd);
        if (o.progress) o.progress(done, total, what);
        IoBenchPoint p{mode, block, qd, {}, std::nullopt};
        IoEngineConfig pc{o.engine, IoShape{block, qd}};
        std::vector<IoSample> ours, theirs;
        for (int r = 0; r < o.repeat && failure.is_ok(); r++) {  // strata and fio take turns
          StatusOr<IoEngineChoice> e = make_io_engine(pc, {o.paths[0]});
          if (!e.is_ok()) { failure = e.status(); break; }
          StatusOr<FileId> f = e->engine->open(report.file, OpenOptions{.direct = true, .writable = mode == IoOp::write});
          if (!f.is_ok()) { failure = f.status(); break; }
          StatusOr<BlockBuffers> buf = make_buffers(*e->engine, block * qd, o.huge_pages);
          if (!buf.is_ok()) { failure = buf.status(); break; }
          StatusOr<IoSample> s = strata_pass(*e->engine, *f, mode, report.size, block, qd, buf->memory.data());
          (void)e->engine->unregister_memory({buf->memory.data(), buf->memory.size()});
          (void)e->engine->close(*f);
          if (!s.is_ok()) { failure = s.status().with_context("bench io: " + what); break; }
          ours.push_back(*s);
          if (!report.fio_version.empty()) {
            StatusOr<IoSample> fs = fio_pass(o, report.file, report.fio_iomem, mode, report.size, block, qd);
            if (fs.is_ok()) theirs.push_back(*fs);
            else report.fio_missing = fs.status().message();
          }
        }
        if (!failure.is_ok()) break;
        p.strata = median_sample(ours);
        if (!theirs.empty()) p.fio = median_sample(theirs);
        report.points.push_back(p);
        done++;
        if (o.paths.size() > 1) {
          if (o.progress) o.progress(done, total, what + fmt::format(" store: 1 vs {} paths", o.paths.size()));
          StatusOr<double> one = store_pass(pc, {o.paths[0]}, mode, report.size / 2);
          StatusOr<double> all = one.is_ok() ? store_pass(pc, o.paths, mode, report.size / 2) : one;
          if (!all.is_ok()) { failure = all.status().with_context("bench io: striping " + what); break; }
          report.striping.push_back(StripePoint{mode, block, qd, static_cast<uint32_t>(o.paths.size()), *one, *all});
          done++;
        }
      }
      if (!failure.is_ok()) break;
    }
    if (!failure.is_ok()) break;
  }
  if (o.progress) o.progress(done, total, "done");
  if (!failure.is_ok()) return failure;  // the run directory's destruction removes the file, on every return
  return report;
}

std::string io_bench_table(const IoBenchReport& r) {
  std::string out = fmt::format("bench io: {} ({} file, engine {}{}, buffers on {})\n", r.file, format_size(r.size),
                                r.engine, r.fallback_reason.empty() ? "" : ", fallback: " + r.fallback_reason,
                                r.huge_pages ? "huge pages" : "4 KiB pages");
  out += r.fio_version.empty() ? fmt::format("fio: not run ({})\n", r.fio_missing)
                               : fmt::format("peer: {} (io_uring, direct, fixedbufs, registerfiles, iomem={})\n",
                                             r.fio_version, r.fio_iomem);
  if (!r.fio_iomem_note.empty()) out += fmt::format("note: {}\n", r.fio_iomem_note);
  out += fmt::format("{:<6} {:>8} {:>4} | {:>7} {:>8} {:>9} {:>9} | {:>7} {:>8} {:>9} {:>9} | {:>6}\n", "mode", "block",
                     "QD", "GB/s", "IOPS", "p50 us", "p99 us", "fio GB/s", "IOPS", "p50 us", "p99 us", "ratio");
  for (const IoBenchPoint& p : r.points) {
    out += fmt::format("{:<6} {:>8} {:>4} | {:>7.3f} {:>8.0f} {:>9.0f} {:>9.0f} |", io_op_name(p.mode),
                       format_size(p.block_bytes), p.queue_depth, p.strata.gbps, p.strata.iops, p.strata.p50_us,
                       p.strata.p99_us);
    if (p.fio)
      out += fmt::format(" {:>8.3f} {:>8.0f} {:>9.0f} {:>9.0f} | {:>5.1f}%\n", p.fio->gbps, p.fio->iops, p.fio->p50_us,
                         p.fio->p99_us, 100.0 * p.strata.gbps / p.fio->gbps);
    else
      out += fmt::format(" {:>8} {:>8} {:>9} {:>9} | {:>6}\n", "-", "-", "-", "-", "-");
  }
  if (!r.striping.empty()) {
    out += fmt::format("\nNVMe store, 1 path against {} paths (striped; stripe unit = block):\n", r.striping[0].paths);
    out += fmt::format("{:<6} {:>8} {:>4} | {:>10} {:>10} | {:>6}\n", "mode", "block", "QD", "1 path", "striped", "ratio");
    for (const StripePoint& s : r.striping)
      out += fmt::format("{:<6} {:>8} {:>4} | {:>10.3f} {:>10.3f} | {:>5.1f}%\n", io_op_name(s.mode),
                         format_size(s.block_bytes), s.queue_depth, s.one_path_gbps, s.striped_gbps,
                         100.0 * s.striped_gbps / s.one_path_gbps);
  }
  return out;
}

std::string io_bench_csv(const IoBenchReport& r) {
  std::string out =
      "mode,block_bytes,queue_depth,strata_gbps,strata_iops,strata_p50_us,strata_p99_us,fio_gbps,fio_iops,"
      "fio_p50_us,fio_p99_us,ratio\n";
  for (const IoBenchPoint& p : r.points) {
    out += fmt::format("{},{},{},{:.4f},{:.1f},{:.1f},{:.1f}", io_op_name(p.mode), p.block_bytes, p.queue_depth,
                       p.strata.gbps, p.strata.iops, p.strata.p50_us, p.strata.p99_us);
    if (p.fio)
      out += fmt::format(",{:.4f},{:.1f},{:.1f},{:.1f},{:.4f}\n", p.fio->gbps, p.fio->iops, p.fio->p50_us,
                         p.fio->p99_us, p.strata.gbps / p.fio->gbps);
    else
      out += ",,,,,\n";
  }
  return out;
}

std::string io_bench_json(const IoBenchReport& r) {
  nlohmann::json j;
  j["engine"] = r.engine;
  j["huge_pages"] = r.huge_pages;
  j["fio_iomem"] = r.fio_iomem;
  j["fio_iomem_note"] = r.fio_iomem_note;
  j["fallback_reason"] = r.fallback_reason;
  j["file"] = r.file;
  j["size_bytes"] = r.size;
  j["fio_version"] = r.fio_version;
  j["points"] = nlohmann::json::array();
  for (const IoBenchPoint& p : r.points) {
    nlohmann::json q{{"mode", io_op_name(p.mode)},     {"block_bytes", p.block_bytes},
                     {"queue_depth", p.queue_depth},   {"strata_gbps", p.strata.gbps},
                     {"strata_iops", p.strata.iops},   {"strata_p50_us", p.strata.p50_us},
                     {"strata_p99_us", p.strata.p99_us}};
    if (p.fio) {
      q["fio_gbps"] = p.fio->gbps;
      q["fio_iops"] = p.fio->iops;
      q["fio_p50_us"] = p.fio->p50_us;
      q["fio_p99_us"] = p.fio->p99_us;
      q["ratio"] = p.strata.gbps / p.fio->gbps;
    }
    j["points"].push_back(q);
  }
  j["striping"] = nlohmann::json::array();
  for (const StripePoint& s : r.striping)
    j["striping"].push_back({{"mode", io_op_name(s.mode)}, {"block_bytes", s.block_bytes}, {"queue_depth", s.queue_depth},
                             {"paths", s.paths}, {"one_path_gbps", s.one_path_gbps}, {"striped_gbps", s.striped_gbps}});
  return j.dump(2);
}

Status io_bench_plot(const std::string& csv_path, const std::string& png_path) {
  // One line per (mode, QD), its rows picked by awk: strata solid, fio dashed; x = KiB, log scale.
  const std::string script = fmt::format(
      "set terminal pngcairo size 1000,600 noenhanced\nset output '{}'\nset datafile separator ','\n"
      "set logscale x 2\nset xlabel 'block size (KiB)'\nset ylabel 'GB/s'\nset key outside right\n"
      "set title 'strata bench io: sequential O_DIRECT, strata (solid) and fio (dashed)'\n"
      "csv = '{}'\nmodes = 'read write'\n"
      "qds = system(\"tail -n +2 '\".csv.\"' | cut -d, -f3 | sort -nu | tr '\\n' ' '\")\n"
      "series(m, q) = sprintf(\"< awk -F, '$1 == \\\"%s\\\" && $3 == %s' '%s'\", m, q, csv)\n"
      "plot for [m in modes] for [q in qds] series(m, q) using ($2/1024):4 with linespoints title m.' QD'.q, \\\n"
      "     for [m in modes] for [q in qds] series(m, q) using ($2/1024):8 with linespoints dt 2 "
      "title 'fio '.m.' QD'.q\n",
      png_path, csv_path);
  return run_gnuplot(script, png_path);
}

}  // namespace strata::bench
