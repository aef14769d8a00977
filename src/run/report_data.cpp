// Reading a run folder for its report (see report.h). Every file goes through the one checked
// opener (io/file_safety.h) and the strict JSON reader (io/json.h); what the page gets is written
// again from the parsed values, numbers through strtod (a non-finite one as null), so a damaged line
// is named here, never half-drawn by the browser. The data's members:
//   run, config          the folder and its config.toml's text
//   metrics, evals       metrics.jsonl's logged steps, and its evaluation rows ({"step", "eval"})
//   eval_file            eval.json (dit_mp evaluate --run), or null
//   accounting           accounting.json (the plan and the last step, one object a rank), or null
//   ranks                ranks.jsonl (each logged step's split and memory per rank), or null
//   trace                trace.json reduced to {names: {pid: name}, spans: [[pid, tid, ts, dur, name,
//                        cat]], flows: [[pid, ts, pid, ts]]} (microseconds), or null
//   grids                [{step, name}] in the order of ReportInputs::grids
#include "run/report.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <initializer_list>
#include <map>
#include <regex>

#include "core/error.h"
#include "core/quote.h"
#include "io/file_roles.h"
#include "io/file_safety.h"
#include "io/json.h"

namespace dit {

namespace fs = std::filesystem;

namespace {

// A row of metrics.jsonl is three levels deep ({"eval": {"samples": {...}}}); a trace's args a few more.
constexpr int kRowDepth = 8;
constexpr int kTraceDepth = 16;

// A number as the page's script reads it: every bit of a finite one, null for the rest.
std::string number_text(const std::string& written, const std::string& where) {
  char* end = nullptr;
  const double v = std::strtod(written.c_str(), &end);
  DIT_CHECK(!written.empty() && end && *end == '\0', where, ": ", written, " is not a number");
  if (!std::isfinite(v)) return "null";
  char b[32];
  std::snprintf(b, sizeof b, "%.17g", v);
  return b;
}

double number_of(const Json& v, const std::string& where) {
  return std::strtod(number_text(v.text, where).c_str(), nullptr);
}

// `v` written again as JSON, its numbers checked (number_text).
void append_json(const Json& v, const std::string& where, std::string& out) {
  switch (v.kind) {
    case Json::Kind::Object:
      out += '{';
      for (std::size_t i = 0; i < v.keys.size(); ++i) {
        if (i) out += ',';
        out += quote_string(v.keys[i]) + ":";
        append_json(v.items[i], where, out);
      }
      out += '}';
      return;
    case Json::Kind::Array:
      out += '[';
      for (std::size_t i = 0; i < v.items.size(); ++i) {
        if (i) out += ',';
        append_json(v.items[i], where, out);
      }
      out += ']';
      return;
    case Json::Kind::String: out += quote_string(v.text); return;
    case Json::Kind::Number: out += number_text(v.text, where); return;
    case Json::Kind::Other: out += v.text; return;
  }
}

std::string json_text(const Json& v, const std::string& where) {
  std::string out;
  append_json(v, where, out);
  return out;
}

std::string file_of(const std::string& run_dir, const char* name) { return (fs::path(run_dir) / name).string(); }

// A line of a JSON Lines file, parsed and written again for the page.
struct Row {
  Json value;
  std::string json;
  std::size_t line = 0;  // in its file, from 1
};

// The rows of a JSON Lines file the run appends to (metrics.jsonl, ranks.jsonl): one object with a
// numeric "step" a line; blank lines are skipped. Empty when the file is not there.
std::vector<Row> read_rows(const std::string& path, const std::string& what) {
  const std::string text = read_regular(path, what);
  std::vector<Row> rows;
  std::size_t line = 0;
  for (std::size_t at = 0; at < text.size();) {
    const std::size_t end = std::min(text.find('\n', at), text.size());
    const std::string row = text.substr(at, end - at);
    at = end + 1;
    ++line;
    if (row.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path + " line " + std::to_string(line);
    Json v = parse_json(row, where, " (each line is one logged step; a damaged or hand-edited file?)", kRowDepth);
    const Json* step = v.kind == Json::Kind::Object ? v.find("step") : nullptr;
    DIT_CHECK(step && step->kind == Json::Kind::Number, where, ": expected an object with a numeric \"step\", as "
              "the run writes one for each logged step");
    std::string json = json_text(v, where);
    rows.push_back({std::move(v), std::move(json), line});
  }
  return rows;
}

// A JSON document, or nullptr text ("null") when the file is not there.
std::string read_document(const std::string& path, const std::string& what, Json::Kind expected) {
  const std::string text = read_regular(path, what);
  if (text.empty()) return "null";
  const Json v = parse_json(text, path, "", kRowDepth);
  DIT_CHECK(v.kind == expected, path, ": expected a JSON ", expected == Json::Kind::Array ? "array" : "object",
            " (", what, ")");
  return json_text(v, path);
}

// A number member of a trace event, or NaN when absent.
double event_number(const Json& e, const char* key, const std::string& where) {
  const Json* v = e.find(key);
  if (!v) return std::nan("");
  DIT_CHECK(v->kind == Json::Kind::Number, where, ": \"", key, "\" is not a number");
  return number_of(*v, where);
}

std::string event_string(const Json& e, const char* key) {
  const Json* v = e.find(key);
  return v && v->kind == Json::Kind::String ? v->text : "";
}

std::string num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.17g", v);
  return b;
}

// "[a,b,...]" of values already written as JSON.
std::string array_of(std::initializer_list<std::string> items) {
  std::string out = "[";
  for (const std::string& item : items) {
    if (out.size() > 1) out += ',';
    out += item;
  }
  return out + "]";
}

// trace.json (Chrome's trace format, as --profile writes it) reduced to what the timeline draws:
// complete events ("X") as spans, flow starts and ends ("s", "f") paired by id as arrows, process
// names ("M") as row labels. Other events are left out.
std::string read_trace(const std::string& path) {
  const std::string text = read_regular(path, "the run's timeline (trace.json)");
  if (text.empty()) return "null";
  const Json doc = parse_json(text, path, " (a Chrome trace: {\"traceEvents\": [...]})", kTraceDepth);
  const Json* events = doc.kind == Json::Kind::Array ? &doc : doc.find("traceEvents");
  DIT_CHECK(events && events->kind == Json::Kind::Array, path, ": expected a Chrome trace, an object whose "
            "\"traceEvents\" is an array of events");
  std::string names, spans, flows;
  std::map<std::string, std::pair<double, double>> open_flows;  // id -> (pid, ts) of its "s"
  for (std::size_t i = 0; i < events->items.size(); ++i) {
    const Json& e = events->items[i];
    const std::string where = path + ": event " + std::to_string(i);
    DIT_CHECK(e.kind == Json::Kind::Object, where, " is not an object");
    const std::string ph = event_string(e, "ph");
    const double pid = event_number(e, "pid", where);
    if (ph == "M" && event_string(e, "name") == "process_name" && std::isfinite(pid)) {
      const Json* args = e.find("args");
      const std::string name = args ? event_string(*args, "name") : "";
      if (!names.empty()) names += ',';
      names += quote_string(num(pid)) + ":" + quote_string(name);
    } else if (ph == "X") {
      const double tid = event_number(e, "tid", where), ts = event_number(e, "ts", where);
      const double dur = event_number(e, "dur", where);
      DIT_CHECK(std::isfinite(pid) && std::isfinite(ts) && std::isfinite(dur) && dur >= 0, where,
                ": a complete event (ph X) needs a numeric pid, ts and a dur of 0 or more");
      if (!spans.empty()) spans += ',';
      spans += array_of({num(pid), num(std::isfinite(tid) ? tid : 0), num(ts), num(dur),
                         quote_string(event_string(e, "name")), quote_string(event_string(e, "cat"))});
    } else if (ph == "s" || ph == "f") {
      const Json* id = e.find("id");
      const double ts = event_number(e, "ts", where);
      if (!id || !std::isfinite(pid) || !std::isfinite(ts)) continue;
      const std::string key = event_string(e, "cat") + "/" + json_text(*id, where);
      if (ph == "s") {
        open_flows[key] = {pid, ts};
      } else if (auto s = open_flows.find(key); s != open_flows.end()) {
        if (!flows.empty()) flows += ',';
        flows += array_of({num(s->second.first), num(s->second.second), num(pid), num(ts)});
        open_flows.erase(s);
      }
    }
  }
  return "{\"names\":{" + names + "},\"spans\":[" + spans + "],\"flows\":[" + flows + "]}";
}

// The sample grids of the folder: samples_step_N.png by step, then samples.png.
std::vector<ReportGrid> read_grids(const std::string& run_dir) {
  static const std::regex step_grid(R"(samples_step_(\d{7})\.png)");
  std::vector<ReportGrid> grids;
  for (const auto& e : fs::directory_iterator(run_dir)) {
    const std::string name = e.path().filename().string();
    std::smatch m;
    const bool stepped = std::regex_match(name, m, step_grid);
    if (!stepped && name != "samples.png") continue;
    ReportGrid g{stepped ? std::stoll(m[1].str()) : -1, name, read_regular(e.path().string(), "a sample grid")};
    DIT_CHECK(g.png.rfind("\x89PNG\r\n\x1a\n", 0) == 0, e.path().string(), " is not a PNG image (",
              kind_name(detect_kind(e.path().string())), "): the run's sample grids are PNGs; move it aside");
    grids.push_back(std::move(g));
  }
  std::sort(grids.begin(), grids.end(), [](const ReportGrid& a, const ReportGrid& b) {
    return (a.step < 0) != (b.step < 0) ? b.step < 0 : a.step < b.step;
  });
  return grids;
}

// ranks.jsonl's rows hold {"ranks": [{"rank": r, ...}, ...]}: what the page's charts index by.
void check_rank_rows(const std::vector<Row>& rows, const std::string& path) {
  for (const Row& row : rows) {
    const Json* ranks = row.value.find("ranks");
    bool ok = ranks && ranks->kind == Json::Kind::Array;
    for (std::size_t k = 0; ok && k < ranks->items.size(); ++k) {
      const Json* rank = ranks->items[k].find("rank");
      ok = ranks->items[k].kind == Json::Kind::Object && rank && rank->kind == Json::Kind::Number;
    }
    DIT_CHECK(ok, path, " line ", row.line, ": expected \"ranks\": an "
              "array of objects, each with its numeric \"rank\"");
  }
}

std::string rows_json(const std::vector<Row>& rows) {
  std::string out = "[";
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (i) out += ',';
    out += rows[i].json;
  }
  return out + "]";
}

}  // namespace

void check_report_run(const std::string& run_dir) {
  struct stat st {};
  DIT_CHECK(::stat(run_dir.c_str(), &st) == 0, "report: ", run_dir, " does not exist: give a run folder (the "
            "run.dir of a training run)");
  DIT_CHECK(S_ISDIR(st.st_mode), "report: ", run_dir, " is ", kind_name(detect_kind(run_dir)), ", not a run "
            "folder: give the run.dir of a training run");
  DIT_CHECK(detect_kind(file_of(run_dir, "config.toml")) == FileKind::RunConfig, "report: ", run_dir,
            " is not a run folder: it holds no config.toml written by dit_mp (a training run writes one at its "
            "start); give the run.dir of a training run");
}

ReportInputs read_report_inputs(const std::string& run_dir) {
  ReportInputs in;
  in.run_dir = run_dir;
  const std::string metrics_path = file_of(run_dir, "metrics.jsonl");
  std::vector<Row> steps, evals;
  for (Row& row : read_rows(metrics_path, "the run's metrics"))
    (row.value.find("eval") ? evals : steps).push_back(std::move(row));
  const std::string ranks_path = file_of(run_dir, "ranks.jsonl");
  const std::vector<Row> ranks = read_rows(ranks_path, "each rank's step split and memory (ranks.jsonl)");
  check_rank_rows(ranks, ranks_path);
  std::error_code ec;
  const bool ranks_there = fs::exists(ranks_path, ec);
  in.grids = read_grids(run_dir);

  std::string grids = "[";
  for (std::size_t i = 0; i < in.grids.size(); ++i) {
    if (i) grids += ',';
    grids += "{\"step\":" + (in.grids[i].step < 0 ? "null" : num(double(in.grids[i].step))) +
             ",\"name\":" + quote_string(in.grids[i].name) + "}";
  }
  grids += "]";
  std::string data = "{\"run\":" + quote_string(fs::absolute(run_dir, ec).lexically_normal().string());
  data += ",\"config\":" + quote_string(read_regular(file_of(run_dir, "config.toml"), "the run's config.toml"));
  data += ",\"metrics\":" + rows_json(steps);
  data += ",\"evals\":" + rows_json(evals);
  data += ",\"eval_file\":" +
          read_document(file_of(run_dir, "eval.json"), "the evaluation's result", Json::Kind::Object);
  data += ",\"accounting\":" + read_document(file_of(run_dir, "accounting.json"), "the accounting", Json::Kind::Array);
  data += ",\"ranks\":" + (ranks_there ? rows_json(ranks) : std::string("null"));
  data += ",\"trace\":" + read_trace(file_of(run_dir, "trace.json"));
  data += ",\"grids\":" + grids + "}";
  in.data = std::move(data);
  return in;
}

}  // namespace dit
