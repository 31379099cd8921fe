// `distllm convert`: a training checkpoint into a Hugging Face model directory, a
// model directory into a checkpoint `train --resume` continues from, or a model
// directory that ships only pytorch_model.bin into one with safetensors.
#include <cstdio>
#include <optional>

#include "distllm/base/error.h"
#include "distllm/checkpoint/manifest.h"
#include "distllm/checkpoint/store.h"
#include "distllm/cli/command.h"
#include "distllm/io/file_util.h"
#include "distllm/model/hf_cache.h"
#include "distllm/model/hf_checkpoint.h"
#include <nlohmann/json.hpp>
#include "distllm/tokenizer/tokenizer.h"
#include "distllm/train/model_conversion.h"

namespace distllm {
namespace {

// The tokenizer the run recorded, if it still exists: in the step directory given,
// or in the checkpoint the conversion takes (`latest`'s, else the newest).
std::string recorded_tokenizer(const std::string& checkpoint_path) {
  std::vector<std::string> steps = {checkpoint_path};
  if (!file_exists(join_path(checkpoint_path, checkpoint::kManifestName)))
    steps = checkpoint::CheckpointStore(checkpoint_path, nullptr, checkpoint::Retention{}).resume_order();
  for (const std::string& step : steps) {
    try {
      auto m = checkpoint::Manifest::parse(read_file(join_path(step, checkpoint::kManifestName)), step);
      std::string t = m.training.value("tokenizer", std::string());
      return t == "byte-level" || file_exists(t) ? t : "";
    } catch (const Error&) {
      // A damaged checkpoint: convert passes over it too; its predecessor's run says.
    }
  }
  return "";  // convert itself reports what is wrong with the checkpoint
}

// --hf DIR --to-hf OUT: the same model rewritten as safetensors in the dtype its
// files hold (f32/f16/bf16 round-trip exactly through f32), with the source's
// tokenizer files and token ids; what a pytorch_model.bin directory is converted with.
void hf_to_hf(const std::string& from, const std::string& to, bool overwrite) {
  SaveOptions save;
  save.overwrite = overwrite;
  save.dtype = map_hf_model(from)->storage_dtype();
  if (save.dtype != DType::kF16 && save.dtype != DType::kBF16) save.dtype = DType::kF32;
  for (const char* name : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json",
                           "merges.txt", "chat_template.jinja"})
    if (file_exists(join_path(from, name))) save.extra_files[name] = read_file(join_path(from, name));
  const std::string gen_path = join_path(from, "generation_config.json");
  if (file_exists(gen_path)) {
    auto gen = nlohmann::json::parse(read_file(gen_path), nullptr, /*allow_exceptions=*/false);
    if (gen.is_object() && gen.value("eos_token_id", nlohmann::json()).is_number_integer())
      save.eos_token_id = gen["eos_token_id"].get<int>();
    if (gen.is_object() && gen.value("bos_token_id", nlohmann::json()).is_number_integer())
      save.bos_token_id = gen["bos_token_id"].get<int>();
  }
  save_hf_model(*load_hf_model(from), to, save);
}

int run_convert(Args& args) {
  auto checkpoint = args.get_optional("checkpoint", "a checkpoint directory (its newest good step) or one step_N "
                                                    "directory, to convert into --to-hf");
  auto to_hf = args.get_optional("to-hf", "write the model directory here (new, empty, or one distllm wrote)");
  auto tokenizer = args.get_optional("tokenizer", "with --to-hf: a tokenizer.json (or a folder holding one) to "
                                                  "put into the model directory");
  const bool overwrite = args.get_flag("overwrite", "with --to-hf: accept a non-empty folder that is not a model "
                                                    "directory (only model files in it are replaced)");
  auto hf = args.get_optional(
      "hf", "a Hugging Face model directory (or hub cache folder, or cached id ORG/NAME) to convert into "
            "--to-checkpoint, or with --to-hf into a directory of safetensors (e.g. from pytorch_model.bin)");
  if (hf) hf = resolve_model_dir(*hf);
  auto to_checkpoint = args.get_optional("to-checkpoint", "write a step-0 checkpoint here (an empty directory)");
  if (args.help_or_finish()) return 0;

  if (checkpoint) {
    DL_CHECK(to_hf && !hf && !to_checkpoint, "--checkpoint goes with --to-hf DIR (and not with --hf)");
    SaveOptions save;
    save.overwrite = overwrite;
    // The tokenizer given, or the one the run recorded (byte-level for --text, the
    // data folder's tokenizer.json), when it is still there.
    std::string source = tokenizer.value_or(recorded_tokenizer(*checkpoint));
    if (!source.empty()) {
      std::optional<Tokenizer> tok;
      if (source == "byte-level" || source == "byte") {
        tok = Tokenizer::byte_level();
      } else {
        tok = Tokenizer::from_file(is_directory(source) ? join_path(source, "tokenizer.json") : source);
      }
      save.extra_files["tokenizer.json"] = tok->to_json();
      if (tok->eos_token_id()) save.eos_token_id = *tok->eos_token_id();
      if (tok->bos_token_id()) save.bos_token_id = *tok->bos_token_id();
    }
    std::string step = checkpoint_to_hf(*checkpoint, *to_hf, save);
    std::printf("converted %s -> %s%s\n", step.c_str(), to_hf->c_str(),
                source.empty() ? " (no tokenizer: pass --tokenizer)" : (" with tokenizer " + source).c_str());
    return 0;
  }
  if (hf && to_hf) {
    DL_CHECK(!to_checkpoint && !tokenizer, "--hf DIR --to-hf OUT takes the tokenizer files from DIR");
    hf_to_hf(*hf, *to_hf, overwrite);
    std::printf("converted %s -> %s (safetensors)\n", hf->c_str(), to_hf->c_str());
    return 0;
  }
  DL_CHECK(hf && to_checkpoint,
           "give --checkpoint DIR --to-hf OUT, --hf DIR --to-checkpoint OUT, or --hf DIR --to-hf OUT");
  DL_CHECK(!to_hf && !tokenizer && !overwrite, "--to-hf, --tokenizer and --overwrite go with --checkpoint");
  std::string step = hf_to_checkpoint(*hf, *to_checkpoint);
  std::printf("converted %s -> %s\n", hf->c_str(), step.c_str());
  return 0;
}

DISTLLM_REGISTER_COMMAND("convert", "between training checkpoints and Hugging Face model directories", run_convert);

}  // namespace
}  // namespace distllm
