// Hot reload over real sockets (docs/serving.md "Hot reload"): the server stack of
// `distllm serve` (ReloadableEngine + ModelReloader + ApiServer) on small random
// Llama models with a byte-level tokenizer. Under a bounded client load the model
// directory is replaced twice (once found by the watcher, once by POST
// /admin/reload): no request fails, every answer is exactly one model's, and after
// each reload the greedy outputs are those of a server started on the new weights.
// A corrupt directory and another tokenizer are refused while the server keeps
// answering; /admin/reload needs the API key.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "distllm/base/parallel.h"
#include "distllm/base/timer.h"
#include "distllm/model/hf_checkpoint.h"
#include "distllm/serve/api/http_server.h"
#include "distllm/client/openai_client.h"
#include "distllm/serve/inference_runner.h"
#include "distllm/serve/model_bundle.h"
#include "distllm/serve/model_reloader.h"
#include "distllm/serve/model_watch.h"
#include "distllm/serve/reloadable_engine.h"
#include "distllm/serve/tokenizer_codec.h"
#include "distllm/tokenizer/tokenizer.h"
#include "distllm/train/model_conversion.h"

namespace distllm::serve::api {
namespace {

namespace fs = std::filesystem;
using client::HttpResult;
using client::OpenAIClient;
using Json = nlohmann::ordered_json;

constexpr const char* kKey = "reload-key";
constexpr int kMaxTokens = 10;

const std::vector<std::string> kPrompts = {"Once upon a time", "The quick brown fox", "In the beginning",
                                           "Hello, world", "A B C D E F G", "distllm serves"};

std::shared_ptr<Transformer> random_model(uint64_t seed) {
  ModelConfig c;
  c.family = ModelFamily::kLlama;
  c.vocab_size = 256;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_kv_head = 2;
  c.n_embd = 32;
  c.max_position = 128;
  c.tie_embeddings = false;  // a tied head mostly repeats the last token: models would agree too often
  c.normalize();
  auto m = std::make_shared<Transformer>(c);
  m->init_weights(seed);
  return m;
}

void write_model(const std::string& dir, uint64_t seed, const std::string& tokenizer_json) {
  SaveOptions opt;
  opt.extra_files["tokenizer.json"] = tokenizer_json;
  save_hf_model(*random_model(seed), dir, opt);
}

// Replaces one file of `dir` in one rename (as a careful writer would).
void replace_file(const std::string& dir, const std::string& name, const std::string& bytes) {
  std::string tmp = (fs::path(dir) / (name + ".tmp")).string();
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << bytes;
  }
  fs::rename(tmp, fs::path(dir) / name);
}

EngineConfig engine_config() {
  EngineConfig c;
  c.block_size = 16;
  c.num_blocks = 128;
  c.scheduler.max_num_seqs = 8;
  c.scheduler.max_num_batched_tokens = 128;
  c.max_queued_requests = 32;
  return c;
}

// `distllm serve --model DIR [--api-key K]` in-process, as cli/serve.cpp wires it.
struct ReloadServer {
  std::string dir;
  std::string signature;
  ModelBundle bundle;
  std::unique_ptr<TokenizerCodec> codec;
  ServeMetrics metrics{"m"};
  std::unique_ptr<ReloadableEngine> engine;
  std::unique_ptr<ModelReloader> reloader;
  ChatFormatter chat = ChatFormatter::default_format();
  std::unique_ptr<ApiServer> server;
  std::thread thread;
  std::unique_ptr<OpenAIClient> client;
  std::string url;

  // `checkpoint_dir`: reload from its checkpoints (--watch-checkpoints).
  ReloadServer(const std::string& model_dir, const std::string& api_key, const std::string& checkpoint_dir = "")
      : dir(model_dir) {
    signature = checkpoint_dir.empty() ? inspect_model_dir(dir).signature : inspect_checkpoint_dir(checkpoint_dir).signature;
    bundle = run_on_transient_thread([&] { return load_model_bundle(dir); });
    codec = std::make_unique<TokenizerCodec>(*bundle.tokenizer);
    engine = std::make_unique<ReloadableEngine>(*codec, engine_config(), metrics);
    run_on_transient_thread([&] { engine->install(std::make_shared<InferenceRunner>(bundle.weights)); });
    metrics.record_model_loaded(1, 0.0, 0.0, false);
    ModelReloaderConfig rc;
    rc.model_dir = dir;
    rc.checkpoint_dir = checkpoint_dir;
    if (!checkpoint_dir.empty())
      rc.load_checkpoint = [](const std::string& ck) -> std::shared_ptr<Transformer> { return load_checkpoint_model(ck); };
    reloader = std::make_unique<ModelReloader>(*engine, codec->tokenizer(), bundle.eos_ids, metrics, rc, signature);
    ApiServerConfig sc;
    sc.port = 0;
    sc.model_name = "m";
    sc.api_key = api_key;
    sc.default_stop_token_ids = bundle.eos_ids;
    sc.reload = [this] { return reloader->reload("POST /admin/reload"); };
    server = std::make_unique<ApiServer>(*engine, chat, metrics, sc);
    int port = server->bind();
    thread = std::thread([this] { server->serve(); });
    url = "http://127.0.0.1:" + std::to_string(port);
    client = std::make_unique<OpenAIClient>(url, api_key, 60);
  }
  ~ReloadServer() {
    reloader->stop_watching();
    server->stop();
    thread.join();
    engine->stop();
  }

  // Greedy text of every prompt (non-streaming).
  std::vector<std::string> greedy() const {
    std::vector<std::string> out;
    for (const auto& p : kPrompts) {
      Json body = {{"model", "m"}, {"prompt", p}, {"max_tokens", kMaxTokens}, {"temperature", 0}};
      HttpResult r = client->post("/v1/completions", body.dump());
      EXPECT_EQ(r.status, 200) << r.body << r.transport_error;
      Json j = Json::parse(r.body, nullptr, false);
      out.push_back(j.is_object() && j.contains("choices") ? j["choices"][0]["text"].get<std::string>() : "<error>");
    }
    return out;
  }
  double metric(const std::string& name) const {
    HttpResult r = client->get("/metrics");
    std::string needle = "distllm:" + name + "{model_name=\"m\"} ";
    size_t at = r.body.find(needle);
    return at == std::string::npos ? -1 : std::stod(r.body.substr(at + needle.size()));
  }
};

// One client request's outcome.
struct Answer {
  size_t prompt = 0;
  std::string text;
  bool ok = false;
  std::string why;
};

Answer ask(const OpenAIClient& c, size_t prompt, bool stream) {
  Answer a;
  a.prompt = prompt;
  Json body = {{"model", "m"}, {"prompt", kPrompts[prompt]}, {"max_tokens", kMaxTokens}, {"temperature", 0}};
  if (!stream) {
    HttpResult r = c.post("/v1/completions", body.dump());
    Json j = Json::parse(r.body, nullptr, false);
    a.ok = r.status == 200 && j.is_object() && j.contains("choices");
    if (a.ok) a.text = j["choices"][0]["text"].get<std::string>();
    if (!a.ok) a.why = std::to_string(r.status) + " " + r.body + r.transport_error;
    return a;
  }
  body["stream"] = true;
  bool finished = false, error = false;
  HttpResult r = c.post_stream("/v1/completions", body.dump(), [&](const std::string& data) {
    Json j = Json::parse(data, nullptr, false);
    if (!j.is_object() || j.contains("error")) {
      error = true;
      return true;
    }
    for (auto& ch : j["choices"]) {
      a.text += ch["text"].get<std::string>();
      if (!ch["finish_reason"].is_null()) finished = ch["finish_reason"] == "length" || ch["finish_reason"] == "stop";
    }
    return true;
  });
  a.ok = r.status == 200 && finished && !error;
  if (!a.ok) a.why = "stream: " + std::to_string(r.status) + " " + r.body + r.transport_error;
  return a;
}

class HotReload : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("distllm_reload_" + std::to_string(::getpid()) + "_" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
    tok_ = Tokenizer::byte_level().to_json();
  }
  void TearDown() override { fs::remove_all(root_); }
  std::string dir(const std::string& name) const { return (root_ / name).string(); }

  // Greedy outputs of a server started directly on `seed`'s weights.
  std::vector<std::string> reference(uint64_t seed) {
    std::string d = dir("ref" + std::to_string(seed));
    write_model(d, seed, tok_);
    ReloadServer s(d, "");
    return s.greedy();
  }

  fs::path root_;
  std::string tok_;
};

TEST_F(HotReload, UnderLoadNoRequestFailsAndNewRequestsSeeNewWeights) {
  const std::vector<std::string> ref_a = reference(101), ref_b = reference(202), ref_c = reference(303);
  // Tiny random models often fall into repeating one token, so two of them may agree
  // on a prompt; most prompts must tell them apart.
  auto differing = [](const std::vector<std::string>& x, const std::vector<std::string>& y) {
    int n = 0;
    for (size_t p = 0; p < x.size(); ++p) n += x[p] != y[p];
    return n;
  };
  EXPECT_GE(differing(ref_a, ref_b), 4);
  EXPECT_GE(differing(ref_b, ref_c), 4);
  EXPECT_GE(differing(ref_a, ref_c), 4);
  const std::string model = dir("model");
  write_model(model, 101, tok_);
  ReloadServer s(model, kKey);
  EXPECT_EQ(s.greedy(), ref_a);
  EXPECT_EQ(s.metric("model_version"), 1);

  // Bounded load: 4 clients, alternating streaming and not, paced, until told to
  // stop (at most 150 requests each, 90 s).
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::vector<Answer> answers;
  std::vector<std::thread> clients;
  Timer load_time;
  for (int c = 0; c < 4; ++c) {
    clients.emplace_back([&, c] {
      OpenAIClient client(s.url, kKey, 60);
      for (int i = 0; i < 150 && !stop.load() && load_time.seconds() < 90; ++i) {
        Answer a = ask(client, static_cast<size_t>(c + i) % kPrompts.size(), (c + i) % 2 == 0);
        {
          std::lock_guard<std::mutex> lock(mu);
          answers.push_back(std::move(a));
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    });
  }
  auto answered = [&] {
    std::lock_guard<std::mutex> lock(mu);
    return answers.size();
  };
  // Lets the load run for `seconds` and at least `more` more answers (bounded).
  auto let_run = [&](double seconds, size_t more) {
    const size_t target = answered() + more;
    Timer t;
    while ((t.seconds() < seconds || answered() < target) && t.seconds() < 30 && load_time.seconds() < 85)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  };

  // 1. --watch finds model B, written over the directory (atomically, as train --out does).
  let_run(0.3, 10);
  s.reloader->start_watching(0.1);
  write_model(model, 202, tok_);
  Timer t;
  while (s.engine->version() < 2 && t.seconds() < 60) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_EQ(s.engine->version(), 2) << "the watcher did not reload";
  s.reloader->stop_watching();

  // 2. POST /admin/reload swaps in model C.
  let_run(0.3, 10);
  write_model(model, 303, tok_);
  HttpResult r = s.client->post("/admin/reload", "");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(Json::parse(r.body)["version"], 3) << r.body;
  let_run(0.3, 10);
  stop = true;
  for (auto& th : clients) th.join();

  // No request failed, and every answer is one model's output, whole (a request
  // runs on the weights it started on).
  std::map<std::string, int> by_model;  // answers only this model gives
  int failed = 0;
  for (const Answer& a : answers) {
    EXPECT_TRUE(a.ok) << a.why;
    if (!a.ok) {
      ++failed;
      continue;
    }
    const std::string& text = a.text;
    const bool is_a = text == ref_a[a.prompt], is_b = text == ref_b[a.prompt], is_c = text == ref_c[a.prompt];
    if (!is_a && !is_b && !is_c) ADD_FAILURE() << "answer to '" << kPrompts[a.prompt] << "' is no model's: '" << text << "'";
    if (is_a && !is_b && !is_c) by_model["a"]++;
    if (is_b && !is_a && !is_c) by_model["b"]++;
    if (is_c && !is_a && !is_b) by_model["c"]++;
  }
  EXPECT_EQ(failed, 0);
  std::printf("load: %zu requests in %.1f s (model A %d, B %d, C %d)\n", answers.size(), load_time.seconds(),
              by_model["a"], by_model["b"], by_model["c"]);
  EXPECT_GE(answers.size(), 30u);
  EXPECT_GT(by_model["a"], 0);
  EXPECT_GT(by_model["c"], 0);

  // After the reloads: exactly what a server started on C answers.
  EXPECT_EQ(s.greedy(), ref_c);
  EXPECT_EQ(s.metric("model_reloads_total"), 2);
  EXPECT_EQ(s.metric("model_version"), 3);
  EXPECT_EQ(s.metric("request_failed_total"), 0);
  // The old engines finished their requests and were freed. A client has its whole
  // answer a moment before the engine drops the finished request: wait for both.
  t = Timer();
  while ((s.engine->retiring() > 0 || s.engine->stats().requests > 0) && t.seconds() < 30)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(s.engine->retiring(), 0);
  EXPECT_EQ(s.engine->stats().requests, 0);
}

TEST_F(HotReload, RefusedReloadsKeepTheOldModelServing) {
  const std::string model = dir("model");
  write_model(model, 101, tok_);
  ReloadServer s(model, kKey);
  const std::vector<std::string> ref_a = s.greedy();

  // Without the key, or with a wrong one: 401, nothing loaded.
  OpenAIClient anonymous(s.url, "", 30), wrong(s.url, "nope", 30);
  EXPECT_EQ(anonymous.post("/admin/reload", "").status, 401);
  EXPECT_EQ(wrong.post("/admin/reload", "").status, 401);
  EXPECT_EQ(s.engine->version(), 1);

  // Corrupt weights (a complete file, but a tensor of an unknown type): 422, A
  // keeps serving.
  write_model(model, 202, tok_);
  std::string bytes;
  {
    std::ifstream in((fs::path(model) / "model.safetensors").string(), std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  std::string corrupt = bytes;
  size_t dtype = corrupt.find("\"F32\"");
  ASSERT_NE(dtype, std::string::npos);
  corrupt.replace(dtype, 5, "\"Q32\"");
  ASSERT_TRUE(inspect_model_dir(model).complete);
  replace_file(model, "model.safetensors", corrupt);
  ASSERT_TRUE(inspect_model_dir(model).complete) << inspect_model_dir(model).problem;
  HttpResult r = s.client->post("/admin/reload", "");
  EXPECT_EQ(r.status, 422) << r.body;
  EXPECT_NE(r.body.find("model_not_loadable"), std::string::npos) << r.body;
  EXPECT_EQ(s.engine->version(), 1);
  EXPECT_EQ(s.greedy(), ref_a);

  // Cut short (a partial write): refused before anything is read.
  replace_file(model, "model.safetensors", bytes.substr(0, bytes.size() / 2));
  r = s.client->post("/admin/reload", "");
  EXPECT_EQ(r.status, 422) << r.body;
  EXPECT_NE(r.body.find("complete model"), std::string::npos) << r.body;
  EXPECT_EQ(s.greedy(), ref_a);

  // Another tokenizer (two tokens swapped): 409 naming why.
  Json tj = Json::parse(tok_);
  auto& vocab = tj["model"]["vocab"];
  ASSERT_TRUE(vocab.is_object() && vocab.size() >= 2) << tok_.substr(0, 200);
  auto first = vocab.begin(), second = std::next(vocab.begin());
  Json tmp = first.value();
  first.value() = second.value();
  second.value() = tmp;
  write_model(model, 202, tj.dump());
  r = s.client->post("/admin/reload", "");
  EXPECT_EQ(r.status, 409) << r.body;
  EXPECT_NE(r.body.find("tokenizer"), std::string::npos) << r.body;
  EXPECT_EQ(s.engine->version(), 1);
  EXPECT_EQ(s.greedy(), ref_a);
  EXPECT_EQ(s.metric("model_reload_failures_total"), 3);
  EXPECT_EQ(s.metric("model_reloads_total"), 0);

  // The watcher does not retry what was refused; a good model is taken.
  s.reloader->start_watching(0.1);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_EQ(s.engine->version(), 1);
  EXPECT_EQ(s.metric("model_reload_failures_total"), 3);
  write_model(model, 202, tok_);
  Timer t;
  while (s.engine->version() < 2 && t.seconds() < 60) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(s.engine->version(), 2);
  EXPECT_EQ(s.greedy(), reference(202));
}

// --watch-checkpoints: a training checkpoint directory instead of a model directory.
TEST_F(HotReload, FromCheckpoints) {
  const std::string model = dir("model"), ck = dir("ck"), b = dir("b");
  write_model(model, 101, tok_);
  fs::create_directories(ck);
  ReloadServer s(model, "", ck);
  const std::vector<std::string> ref_a = s.greedy();
  s.reloader->start_watching(0.1);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(s.engine->version(), 1) << "no checkpoint yet";
  write_model(b, 202, tok_);
  hf_to_checkpoint(b, ck);  // step 0: the step directory, then `latest`
  Timer t;
  while (s.engine->version() < 2 && t.seconds() < 60) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_EQ(s.engine->version(), 2);
  const std::vector<std::string> now = s.greedy();
  EXPECT_EQ(now, reference(202));
  EXPECT_NE(now, ref_a);
  // POST /admin/reload reads the newest checkpoint again.
  HttpResult r = s.client->post("/admin/reload", "");
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(s.engine->version(), 3);
  EXPECT_EQ(s.greedy(), now);
}

}  // namespace
}  // namespace distllm::serve::api
