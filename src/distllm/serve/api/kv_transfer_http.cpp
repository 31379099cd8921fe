#include "distllm/serve/api/kv_transfer_http.h"

#include <algorithm>
#include <chrono>
#include <memory>

#include "distllm/base/error.h"
#include "distllm/base/log.h"
#include "distllm/base/strings.h"
#include "distllm/base/timer.h"
#include "distllm/http/client_deadline.h"
#include "distllm/http/edge.h"
#include "distllm/http/peer_socket.h"
#include "distllm/http/prometheus.h"

namespace distllm::serve::api {
namespace {

namespace wire = kv_transfer;

void send_json_error(httplib::Response& res, int status, const std::string& message) {
  http::send_openai_error(res, status, message, "", "kv_prefill_failed");
}

}  // namespace

ServeRole serve_role_from_name(std::string_view name) {
  if (name == "both") return ServeRole::kBoth;
  if (name == "prefill") return ServeRole::kPrefill;
  if (name == "decode") return ServeRole::kDecode;
  throw Error(strprintf("--role must be both, prefill or decode, got '%.*s'", static_cast<int>(name.size()), name.data()));
}

const char* serve_role_name(ServeRole role) {
  switch (role) {
    case ServeRole::kPrefill: return "prefill";
    case ServeRole::kDecode: return "decode";
    case ServeRole::kBoth: break;
  }
  return "both";
}

KvTransfer::KvTransfer(Engine& engine, KvTransferConfig config)
    : KvTransfer(engine, [&engine] { return std::shared_ptr<Engine>(&engine, [](Engine*) {}); }, std::move(config)) {}

KvTransfer::KvTransfer(EngineClient& client, EngineProvider engine, KvTransferConfig config)
    : client_(client), engine_(std::move(engine)), config_(std::move(config)) {
  DL_CHECK(config_.timeout_s > 0, "--kv-transfer-timeout must be positive, got %g", config_.timeout_s);
  DL_CHECK(config_.connect_timeout_s > 0, "--kv-transfer-connect-timeout must be positive, got %g",
           config_.connect_timeout_s);
  DL_CHECK(config_.min_prompt_tokens >= 0, "--kv-transfer-min-tokens must not be negative, got %d",
           config_.min_prompt_tokens);
  const std::shared_ptr<Engine> e = this->engine();
  const kv_transfer::KvFingerprint fp = fingerprint();
  DL_CHECK(fp.block_bytes() == e->runner().kv_bytes_per_block(e->block_size()),
           "the model runner's KV block (%zu bytes) does not match its geometry (%s: %zu bytes)",
           e->runner().kv_bytes_per_block(e->block_size()), fp.describe().c_str(), fp.block_bytes());
  if (config_.role != ServeRole::kBoth) {
    DL_CHECK(e->config().enable_prefix_cache, "--role %s needs the prefix cache (drop --no-prefix-cache)",
             serve_role_name(config_.role));
  }
}

std::shared_ptr<Engine> KvTransfer::engine() const {
  std::shared_ptr<Engine> e = engine_();
  if (!e) throw RequestError(503, "no model is loaded yet");
  return e;
}

kv_transfer::KvFingerprint KvTransfer::fingerprint() const {
  const std::shared_ptr<Engine> e = engine();
  const KvGeometry g = e->runner().kv_geometry();
  kv_transfer::KvFingerprint fp;
  fp.dtype = g.dtype;
  fp.block_size = static_cast<uint32_t>(e->block_size());
  fp.num_layers = static_cast<uint32_t>(g.num_layers);
  fp.num_kv_heads = static_cast<uint32_t>(g.num_kv_heads);
  fp.head_dim = static_cast<uint32_t>(g.head_dim);
  fp.vocab_size = static_cast<uint32_t>(e->runner().vocab_size());
  return fp;
}

// One prefill request's engine work, shared by the handler and its stream.
struct KvTransfer::PrefillJob {
  std::shared_ptr<OutputQueue> queue = std::make_shared<OutputQueue>();
  std::vector<uint64_t> ids;
  std::vector<int32_t> tokens;  // the prompt
  int usable = 0;               // its full blocks a decode replica can use
  bool finished = false;        // the engine request ended (no abort needed)
};

void KvTransfer::handle_prefill(const httplib::Request& req, httplib::Response& res) {
  prefill_requests_.fetch_add(1);
  kv_transfer::KvFingerprint fp;
  try {
    fp = fingerprint();
  } catch (const RequestError& e) {
    return send_json_error(res, e.status(), e.what());
  }
  auto job = std::make_shared<PrefillJob>();
  try {
    job->tokens = wire::parse_prefill_request(req.body, fp.vocab_size);
  } catch (const Error& e) {
    return send_json_error(res, 400, e.what());
  }
  job->usable = usable_blocks(job->tokens.size(), fp.block_size);
  job->finished = job->usable == 0;
  if (job->usable > 0) {
    // A one-token greedy request over the usable blocks plus one token: when it
    // finishes, the prefix cache holds those blocks.
    GenerationRequest g;
    g.prompt.assign(job->tokens.begin(),
                    job->tokens.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(job->usable) * fp.block_size + 1));
    g.max_tokens = 1;
    g.sampling.temperature = 0;
    g.seed = 0;
    g.ignore_eos = true;
    try {
      std::vector<GenerationRequest> reqs;
      reqs.push_back(std::move(g));
      job->ids = client_.submit(std::move(reqs), job->queue);
    } catch (const RequestError& e) {
      return send_json_error(res, e.status(), e.what());  // a full queue: the decode side knows at once
    }
  }
  // The head goes out now; the blocks follow once the prefill is done.
  res.status = 200;
  res.set_chunked_content_provider(
      "application/x-distllm-kv",
      [this, job, fp](size_t, httplib::DataSink& sink) {
        std::vector<std::string> blocks;
        try {
          blocks = run_prefill(*job, fp);
        } catch (const std::exception& e) {
          LOG_WARN("kv transfer: prefill of %zu tokens for a decode replica failed: %s", job->tokens.size(), e.what());
          return false;  // the stream ends early: the decode replica computes the prompt itself
        }
        wire::KvHeader h;
        h.fingerprint = fp;
        h.num_blocks = static_cast<uint32_t>(blocks.size());
        h.tokens.assign(job->tokens.begin(), job->tokens.begin() + static_cast<std::ptrdiff_t>(blocks.size() * fp.block_size));
        auto write = [&](const std::string& s) { return sink.write(s.data(), s.size()); };
        if (!write(wire::encode_header(h))) return false;
        for (size_t i = 0; i < blocks.size(); ++i) {
          const std::string& b = blocks[i];
          if (!write(wire::encode_block_head(static_cast<uint32_t>(i), b)) || !write(b)) return false;
          blocks_sent_.fetch_add(1);
          bytes_sent_.fetch_add(static_cast<int64_t>(b.size()));
        }
        if (!write(wire::encode_end(static_cast<uint32_t>(blocks.size())))) return false;
        sink.done();
        return true;
      },
      [this, job](bool) {
        if (!job->finished) client_.abort(job->ids);  // the decode replica gave up, or the prefill timed out
      });
}

std::vector<std::string> KvTransfer::run_prefill(PrefillJob& job, const kv_transfer::KvFingerprint& fp) {
  if (job.usable == 0) return {};
  const int client = http::HttpFront::current_socket();
  Timer t;
  std::vector<OutputDelta> deltas;
  FinishReason finish = FinishReason::kNone;
  std::string error;
  while (finish == FinishReason::kNone) {
    if (t.seconds() > config_.timeout_s) throw Error(strprintf("the prefill did not finish within %g s", config_.timeout_s));
    if (http::peer_closed(client)) throw Error("the decode replica went away");
    deltas.clear();
    job.queue->pop_all(deltas, 0.05);
    for (const OutputDelta& d : deltas) {
      if (d.finish != FinishReason::kNone) {
        finish = d.finish;
        error = d.error;
      }
    }
  }
  job.finished = true;
  if (finish != FinishReason::kStop && finish != FinishReason::kLength) throw Error("the prefill failed: " + error);
  std::vector<int32_t> run(job.tokens.begin(),
                           job.tokens.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(job.usable) * fp.block_size));
  // If a reload swapped the engine since the submit, this one holds fewer (or none)
  // of the blocks: the decode side computes what is missing.
  return engine()->export_cached_prefix(std::move(run), job.usable, config_.timeout_s);
}

int KvTransfer::pull_or_throw(const std::string& prefill_url, const std::vector<int32_t>& prompt, int64_t& bytes) {
  const kv_transfer::KvFingerprint fp = fingerprint();
  const int usable = usable_blocks(prompt.size(), fp.block_size);
  if (usable == 0) return 0;
  DL_CHECK(prefill_url.rfind("http://", 0) == 0, "%s must be an http://host:port URL, got '%s'", kPrefillFromHeader,
           prefill_url.c_str());
  httplib::Client cli(prefill_url);
  DL_CHECK(cli.is_valid(), "%s: '%s' is not a usable URL", kPrefillFromHeader, prefill_url.c_str());
  auto micros = [](double s) {
    return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::duration<double>(s));
  };
  const double head_timeout = std::min(config_.connect_timeout_s, config_.timeout_s);
  cli.set_connection_timeout(micros(head_timeout));
  cli.set_read_timeout(micros(config_.timeout_s));  // each read; the deadline below bounds the whole pull
  cli.set_write_timeout(micros(config_.timeout_s));
  httplib::Request up;
  up.method = "POST";
  up.path = kPrefillPath;
  up.headers.emplace("Content-Type", "application/json");
  if (!config_.api_key.empty()) up.headers.emplace("Authorization", "Bearer " + config_.api_key);
  up.body = wire::encode_prefill_request(prompt);
  int status = 0;
  std::string error_body;
  // Bounded by what this prompt can use (with room for a bigger model's blocks to
  // reach the fingerprint check below and be refused by name).
  wire::DecoderLimits limits;
  limits.max_total_bytes = static_cast<size_t>(usable) * fp.block_bytes() * 8 + (size_t{1} << 20);
  wire::KvStreamDecoder decoder(limits);
  std::string mismatch;
  http::ClientDeadline deadline(cli, head_timeout, config_.timeout_s);
  up.response_handler = [&](const httplib::Response& r) {
    status = r.status;
    deadline.got_head();
    return true;
  };
  up.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (status != 200) {
      if (error_body.size() < 4096) error_body.append(data, std::min<size_t>(n, 4096 - error_body.size()));
      return true;
    }
    bytes += static_cast<int64_t>(n);
    if (decoder.feed(std::string_view(data, n)) == wire::KvStreamDecoder::Status::kError) return false;
    // Another model's blocks are refused as soon as the header says so.
    if (decoder.has_header() && mismatch.empty())
      mismatch = wire::fingerprint_mismatch(fp, decoder.header().fingerprint);
    return mismatch.empty();
  };
  httplib::Result r = cli.send(up);
  const http::ClientDeadline::Missed missed = deadline.finish();
  if (missed == http::ClientDeadline::Missed::kHead)
    throw Error(strprintf("%s did not answer within %g s (hung or overloaded?)", prefill_url.c_str(), head_timeout));
  if (missed == http::ClientDeadline::Missed::kWhole)
    throw Error(strprintf("the pull from %s took longer than %g s", prefill_url.c_str(), config_.timeout_s));
  if (!mismatch.empty())
    throw Error(strprintf("KV transfer: %s serves another model or block size (%s): its blocks cannot be used here",
                          prefill_url.c_str(), mismatch.c_str()));
  if (decoder.status() == wire::KvStreamDecoder::Status::kError) throw Error(decoder.error());
  if (!r) throw Error(strprintf("cannot reach %s: %s", prefill_url.c_str(), httplib::to_string(r.error()).c_str()));
  if (status != 200) throw Error(strprintf("%s answered HTTP %d: %s", prefill_url.c_str(), status, error_body.c_str()));
  if (decoder.status() != wire::KvStreamDecoder::Status::kDone)
    throw Error(strprintf("KV transfer: the stream from %s ended early (%zu blocks)", prefill_url.c_str(),
                          decoder.blocks().size()));
  const wire::KvHeader& h = decoder.header();
  DL_CHECK(h.num_blocks <= static_cast<uint32_t>(usable) &&
               std::equal(h.tokens.begin(), h.tokens.end(), prompt.begin()),
           "KV transfer: %s sent blocks for other tokens than this prompt's", prefill_url.c_str());
  if (h.num_blocks == 0) return 0;
  blocks_received_.fetch_add(h.num_blocks);
  // Into the version serving now (its block size is checked there again).
  return this->engine()->import_prefix(h.tokens, std::move(decoder.blocks()), config_.timeout_s);
}

int KvTransfer::pull(const std::string& prefill_url, const std::vector<int32_t>& prompt) {
  try {
    if (usable_blocks(prompt.size(), fingerprint().block_size) == 0) return 0;
  } catch (const std::exception&) {
    return 0;  // no model loaded: nothing to pull into
  }
  if (static_cast<int64_t>(prompt.size()) < config_.min_prompt_tokens) return 0;
  pulls_.fetch_add(1);
  Timer t;
  int64_t bytes = 0;
  int cached = 0;
  try {
    cached = pull_or_throw(prefill_url, prompt, bytes);
  } catch (const std::exception& e) {
    fallbacks_.fetch_add(1);
    LOG_WARN("kv transfer: pulling %zu prompt tokens from %s failed, computing them here: %s", prompt.size(),
             prefill_url.c_str(), e.what());
    cached = 0;
  }
  bytes_received_.fetch_add(bytes);
  transfer_micros_.fetch_add(static_cast<int64_t>(t.seconds() * 1e6));
  return cached;
}

KvTransfer::Counters KvTransfer::counters() const {
  Counters c;
  c.blocks_sent = blocks_sent_.load();
  c.bytes_sent = bytes_sent_.load();
  c.prefill_requests = prefill_requests_.load();
  c.blocks_received = blocks_received_.load();
  c.bytes_received = bytes_received_.load();
  c.pulls = pulls_.load();
  c.fallbacks = fallbacks_.load();
  c.transfer_seconds = static_cast<double>(transfer_micros_.load()) * 1e-6;
  return c;
}

std::string KvTransfer::render_metrics(const std::string& model_name) const {
  const Counters c = counters();
  const std::string labels = "model_name=\"" + escape_prometheus_label(model_name) + "\"";
  http::PrometheusText text;
  auto counter = [&](const char* name, const char* help, int64_t value) {
    text.counter(std::string("distllm:kv_transfer_") + name, help, value, labels);
  };
  counter("prefill_requests_total", "Prefill requests answered (prefill role).", c.prefill_requests);
  counter("blocks_sent_total", "KV blocks sent to decode replicas.", c.blocks_sent);
  counter("bytes_sent_total", "KV payload bytes sent to decode replicas.", c.bytes_sent);
  counter("pulls_total", "Prompts whose KV this decode replica pulled from a prefill replica.", c.pulls);
  counter("blocks_received_total", "KV blocks received whole and checked (decode role).", c.blocks_received);
  counter("bytes_received_total", "Bytes received from prefill replicas.", c.bytes_received);
  text.family("distllm:kv_transfer_seconds_total", "counter",
              "Seconds spent pulling KV (request, remote prefill, transfer, import).");
  text.sample("distllm:kv_transfer_seconds_total", labels, c.transfer_seconds);
  counter("fallbacks_total", "Pulls that failed: the prompt was computed locally.", c.fallbacks);
  return std::move(text.text());
}

}  // namespace distllm::serve::api
