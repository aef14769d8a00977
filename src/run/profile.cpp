// The timeline of a profiled run (see profile.h).
#include "run/profile.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <tuple>

#include "core/clock.h"
#include "core/trace.h"
#include "io/atomic_file.h"
#include "parallel/schedule_sim.h"
#include "run/log.h"

namespace dit {

namespace {

constexpr int kTag = 31000;         // world point-to-point tags of the profile's own messages
constexpr int kPings = 8;           // clock exchanges per rank; the shortest round trip counts
constexpr int kHostChars = 64;

// Host bytes as int32 words through a Comm (its tensors carry no byte type).
Tensor words(void* p, std::size_t bytes) {
  return Tensor{p, DType::I32, {static_cast<std::int64_t>(bytes / 4)}, Device::Host};
}

void send_block(Comm& c, void* p, std::size_t bytes, int peer, int tag) {
  if (bytes == 0) return;
  Request r = c.isend(words(p, bytes), peer, tag);
  c.wait(r);
}
void recv_block(Comm& c, void* p, std::size_t bytes, int peer, int tag) {
  if (bytes == 0) return;
  Request r = c.irecv(words(p, bytes), peer, tag);
  c.wait(r);
}

std::string escaped(const std::string& s) {
  std::string out;
  for (char ch : s) {
    if (ch == '"' || ch == '\\') out += '\\';
    if (static_cast<unsigned char>(ch) >= 0x20) out += ch;
  }
  return out;
}

std::string us(double seconds) {  // trace timestamps: microseconds, to the nanosecond
  char b[48];
  std::snprintf(b, sizeof b, "%.3f", seconds * 1e6);
  return b;
}

// A pipeline action as the bubble check reads it: (step, stage's op, microbatch, chunk) and its span;
// or one end of a message: op kSendEnd or kReceiveEnd, mb its message_id (core/trace.h), ts.
struct ActionRecord {
  double step, op, mb, chunk, ts, dur;
};
constexpr double kSendEnd = 10, kReceiveEnd = 11;

Op op_of(const std::string& cat, bool split) {
  if (cat == "forward") return Op::Forward;
  if (cat == "weight") return Op::BackwardWeight;
  return split ? Op::BackwardInput : Op::Backward;
}

}  // namespace

Profiler::Profiler(ParallelContext& ctx, const TrainSetup& setup, ProfileSteps steps, std::string path)
    : ctx_(&ctx), setup_(setup), steps_(steps), path_(std::move(path)) {}

void Profiler::before_step(std::int64_t step) {
  if (step != steps_.first || recording_ || written_) return;
  // Clock alignment: rank 0 pings each rank in turn; the reply carries the rank's clock, and the
  // exchange with the shortest round trip gives its offset to within half of it.
  Comm& w = *ctx_->world;
  const int n = w.size();
  if (w.rank() == 0) {
    offsets_.assign(static_cast<std::size_t>(n), 0.0);
    for (int r = 1; r < n; ++r) {
      double best = 1e300, offset = 0;
      for (int k = 0; k < kPings; ++k) {
        double ping = 0, theirs = 0;
        const double t0 = trace::clock_s();
        send_block(w, &ping, sizeof ping, r, kTag);
        recv_block(w, &theirs, sizeof theirs, r, kTag + 1);
        const double t1 = trace::clock_s();
        if (t1 - t0 < best) best = t1 - t0, offset = theirs - 0.5 * (t0 + t1);
      }
      offsets_[static_cast<std::size_t>(r)] = offset;
      send_block(w, &offset, sizeof offset, r, kTag + 2);
    }
  } else {
    for (int k = 0; k < kPings; ++k) {
      double ping = 0;
      recv_block(w, &ping, sizeof ping, 0, kTag);
      double mine = trace::clock_s();
      send_block(w, &mine, sizeof mine, 0, kTag + 1);
    }
    recv_block(w, &offset_s_, sizeof offset_s_, 0, kTag + 2);
  }
  trace::take();  // nothing from before the range
  trace::set_on(true);
  recording_ = true;
}

std::string Profiler::after_step(std::int64_t step) {
  if (!recording_ || step != steps_.last) return "";
  return write();
}

std::string Profiler::finish() { return recording_ ? write() : ""; }

std::string Profiler::write() {
  trace::set_on(false);
  recording_ = false;
  written_ = true;
  const std::vector<trace::Event> events = trace::take();
  const Layout& l = ctx_->layout;
  const int pp = l.pp, m = setup_.batch.microbatches;
  const int lane = ctx_->coord.tp + l.tp * ctx_->coord.dp, lanes = l.world() / pp;
  int v = 1;
  for (const Action& a : make_pipeline_schedule(setup_.train.schedule, pp, 0, m, setup_.train.virtual_stages))
    v = std::max(v, a.chunk + 1);
  const bool split = is_zero_bubble(setup_.train.schedule);
  const int me = ctx_->world_rank;

  // This rank's events as trace JSON on rank 0's clock, and its pipeline actions for the bubble.
  std::string json;
  std::vector<ActionRecord> actions;
  for (const trace::Event& e : events) {
    const double ts = e.ts - offset_s_;
    std::string line = "{\"ph\": \"" + std::string(1, e.ph) + "\", \"pid\": " + std::to_string(me) +
                       ", \"tid\": 0, \"name\": \"" + escaped(e.name) + "\", \"cat\": \"" + e.cat + "\", \"ts\": " + us(ts);
    if (e.ph == 'X') {
      line += ", \"dur\": " + us(e.dur) + ", \"args\": {\"step\": " + std::to_string(e.step) +
              (e.args.empty() ? "" : ", " + e.args) + "}";
      const std::string cat = e.cat;
      if (cat == "forward" || cat == "backward" || cat == "weight") {
        int mb = 0, chunk = 0;
        std::sscanf(e.args.c_str(), "\"mb\": %d, \"chunk\": %d", &mb, &chunk);
        actions.push_back({double(e.step), double(static_cast<int>(op_of(cat, split))), double(mb), double(chunk), ts, e.dur});
      }
    } else {
      // A message's id, the same at both ends: its step, pipeline, direction, receiver and microbatch.
      const std::uint64_t local = e.id;
      const std::uint64_t to_stage = local % 65536, to_chunk = (local / 65536) % 256,
                          mb = (local / (65536ull * 256)) % 65536, dir = local / (65536ull * 256 * 65536);
      const std::uint64_t pairs = std::uint64_t(v) * std::uint64_t(m);
      const std::uint64_t id =
          ((((std::uint64_t(e.step - steps_.first) * lanes + lane) * 2 + dir) * pairs + to_chunk * m + mb) * pp +
           to_stage) + 1;
      line += ", \"id\": " + std::to_string(id);  // the receive binds to the next span: the action it feeds
      actions.push_back({double(e.step), e.ph == 's' ? kSendEnd : kReceiveEnd, double(local), 0, ts, 0});
    }
    json += line + "},\n";
  }

  // Everything to rank 0, one rank at a time: sizes, then the text and the actions.
  Comm& w = *ctx_->world;
  char host[kHostChars] = {};
  gethostname(host, kHostChars - 1);
  double header[5] = {double(json.size()), double(actions.size()), double(ctx_->coord.pp), double(lane), 0};
  if (me != 0) {
    std::string padded = json + std::string((4 - json.size() % 4) % 4, ' ');
    send_block(w, header, sizeof header, 0, kTag + 3);
    send_block(w, host, sizeof host, 0, kTag + 4);
    send_block(w, padded.data(), padded.size(), 0, kTag + 5);
    send_block(w, actions.data(), actions.size() * sizeof(ActionRecord), 0, kTag + 6);
    return "";
  }
  std::vector<std::string> hosts = {host};
  std::vector<int> stage_of = {ctx_->coord.pp}, lane_of = {lane};
  std::map<std::tuple<int, int, int>, std::vector<ActionRecord>> by_pipe;  // (lane, step, stage)
  for (const ActionRecord& a : actions) by_pipe[{lane, int(a.step), ctx_->coord.pp}].push_back(a);
  std::string body = json;
  for (int r = 1; r < w.size(); ++r) {
    double h[5];
    recv_block(w, h, sizeof h, r, kTag + 3);
    char their_host[kHostChars];
    recv_block(w, their_host, sizeof their_host, r, kTag + 4);
    their_host[kHostChars - 1] = 0;
    hosts.emplace_back(their_host);
    stage_of.push_back(int(h[2]));
    lane_of.push_back(int(h[3]));
    const auto text_bytes = static_cast<std::size_t>(h[0]);
    std::string text(text_bytes + (4 - text_bytes % 4) % 4, ' ');
    recv_block(w, text.data(), text.size(), r, kTag + 5);
    body += text.substr(0, text_bytes);
    std::vector<ActionRecord> theirs(static_cast<std::size_t>(h[1]));
    recv_block(w, theirs.data(), theirs.size() * sizeof(ActionRecord), r, kTag + 6);
    for (const ActionRecord& a : theirs) by_pipe[{int(h[3]), int(a.step), int(h[2])}].push_back(a);
  }

  // Per pipeline and step: the measured bubble, the simulator's on the same durations (the
  // schedule's own idle time at them), and the simulator's with each message's measured latency
  // too (its replay: what the ranks' shared cores and the transport added shows there).
  const ChunkPlacement pl = setup_.train.stage.placement;
  std::string pipes;
  for (int ln = 0; ln < lanes; ++ln)
    for (std::int64_t st = steps_.first; st <= steps_.last; ++st) {
      std::vector<std::vector<Action>> lists;
      using Key = std::tuple<int, int, int, int>;  // (stage, op, mb, chunk)
      std::map<Key, double> dur, link;
      std::map<double, std::pair<double, double>> message;  // message_id -> (sent, received)
      double first = 1e300, last = -1e300, busy = 0;
      bool any = false;
      for (int s = 0; s < pp; ++s) {
        lists.push_back(make_pipeline_schedule(setup_.train.schedule, pp, s, m, setup_.train.virtual_stages));
        const auto it = by_pipe.find({ln, int(st), s});
        if (it == by_pipe.end()) continue;
        for (const ActionRecord& a : it->second) {
          if (a.op == kSendEnd || a.op == kReceiveEnd) {
            (a.op == kSendEnd ? message[a.mb].first : message[a.mb].second) = a.ts;
            continue;
          }
          any = true;
          dur[{s, int(a.op), int(a.mb), int(a.chunk)}] = a.dur;
          first = std::min(first, a.ts), last = std::max(last, a.ts + a.dur), busy += a.dur;
        }
      }
      if (!any) continue;
      // Each message's latency belongs to the action that sent it: the model chunk before the
      // receiver's (activations) or after it (gradients).
      for (const auto& [id, ends] : message) {
        const auto local = static_cast<std::uint64_t>(id);
        const int to_stage = int(local % 65536), to_chunk = int((local / 65536) % 256),
                  mb = int((local / (65536ull * 256)) % 65536), dir = int(local / (65536ull * 256 * 65536));
        const int k = model_chunk(pp, to_stage, to_chunk, pl) + (dir == 0 ? -1 : 1);
        const ChunkAt from = chunk_at(pp, k, pl);
        const Op op = dir == 0 ? Op::Forward : split ? Op::BackwardInput : Op::Backward;
        link[{from.stage, int(op), mb, from.chunk}] = std::max(0.0, ends.second - ends.first);
      }
      const auto lookup = [](const std::map<Key, double>& in, int s, const Action& a) {
        const auto it = in.find({s, int(a.op), a.microbatch, a.chunk});
        return it == in.end() ? 0.0 : it->second;
      };
      const auto cost = [&](int s, const Action& a) { return lookup(dur, s, a); };
      const PipelineSim sim = simulate_pipeline(lists, v, cost, [](int, const Action&) { return 0.0; }, pl);
      const PipelineSim replay = simulate_pipeline(lists, v, cost, [&](int s, const Action& a) { return lookup(link, s, a); }, pl);
      const double measured = last > first ? 1 - busy / (double(pp) * (last - first)) : 0;
      pipes += std::string(pipes.empty() ? "" : ", ") + "{\"pipeline\": " + std::to_string(ln) +
               ", \"step\": " + std::to_string(st) + ", \"measured_bubble\": " + json_number(measured) +
               ", \"simulated_bubble\": " + json_number(sim.completed ? sim.bubble() : NAN) +
               ", \"replayed_bubble\": " + json_number(replay.completed ? replay.bubble() : NAN) + "}";
    }

  std::string meta;
  for (int r = 0; r < w.size(); ++r) {
    const GridCoord c = grid_coord(l, r);
    const std::string name = "rank " + std::to_string(r) + ": tp " + std::to_string(c.tp) + " pp " +
                             std::to_string(c.pp) + " dp " + std::to_string(c.dp) + " on " + hosts[std::size_t(r)];
    meta += "{\"ph\": \"M\", \"pid\": " + std::to_string(r) + ", \"name\": \"process_name\", \"args\": {\"name\": \"" +
            escaped(name) + "\"}},\n{\"ph\": \"M\", \"pid\": " + std::to_string(r) +
            ", \"name\": \"process_sort_index\", \"args\": {\"sort_index\": " + std::to_string(r) + "}},\n";
  }
  std::string offsets, host_list;
  for (int r = 0; r < w.size(); ++r) {
    offsets += std::string(r ? ", " : "") + json_number(offsets_[std::size_t(r)]);
    host_list += std::string(r ? ", " : "") + "\"" + escaped(hosts[std::size_t(r)]) + "\"";
  }
  body = "{\"traceEvents\": [\n" + meta + body;
  body.resize(body.size() - 2);  // the last ",\n"
  body += "\n], \"displayTimeUnit\": \"ms\", \"otherData\": {\"layout\": \"" + l.str() + "\", \"schedule\": \"" +
          schedule_name(setup_.train.schedule) + "\", \"virtual_stages\": " + std::to_string(setup_.train.virtual_stages) +
          ", \"microbatches\": " + std::to_string(m) + ", \"steps\": [" + std::to_string(steps_.first) + ", " +
          std::to_string(steps_.last) + "], \"clock_offsets_s\": [" + offsets + "], \"hosts\": [" + host_list +
          "], \"pipelines\": [" + pipes + "]}}\n";
  write_file_atomic(path_, body, "the profile's timeline");
  return "profile of steps " + std::to_string(steps_.first) + " to " + std::to_string(steps_.last) + " written to " +
         path_ + " (open it in Perfetto or chrome://tracing)";
}

}  // namespace dit
