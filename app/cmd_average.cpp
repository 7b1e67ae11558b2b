// gradflow average: the element-wise mean of checkpoints' weights (train/loop/average.h).
#include <fmt/core.h>

#include <filesystem>
#include <sstream>

#include "app/commands.h"
#include "app/command_flags.h"
#include "app/flags.h"
#include "tensor/check.h"
#include "tensor/io/safetensors.h"
#include "train/loop/average.h"

namespace gf::app {

Flags average_flags() {
  Flags f("average",
          "Writes the mean of several checkpoints' weights. With --model RUN, the last --last K of the run's kept epoch\n"
          "weights (epoch-NNNN.safetensors; `train --average-last K` keeps them) into RUN/average.safetensors; or any\n"
          "--files a.safetensors,b.safetensors,... of the same model into --out. Score the result with\n"
          "`gradflow eval --model RUN/average.safetensors`.");
  f.add_string("model", "", "run folder whose epoch-NNNN.safetensors to average");
  f.add_int("last", 5, "how many of the run's last epochs");
  f.add_string("files", "", "comma-separated weight files instead of --model");
  f.add_string("out", "", "file to write (default with --model: RUN/average.safetensors)");
  return f;
}

void check_average_flags(const Flags& f) {
  if (!f.str("files").empty()) {
    GF_CHECK_AS(UsageError, !f.str("out").empty(), "average: --files needs --out FILE");
  } else {
    GF_CHECK_AS(UsageError, !f.str("model").empty(), "average: give --model RUN or --files a,b,...");
    GF_CHECK_AS(UsageError, f.integer("last") >= 1, "average: --last must be at least 1, got {}", f.integer("last"));
  }
}

int cmd_average(int argc, char** argv) {
  Flags f = average_flags();
  if (!f.parse(argc, argv)) return 0;
  check_average_flags(f);
  std::vector<std::string> files;
  std::string out = f.str("out");
  if (!f.str("files").empty()) {
    std::istringstream in(f.str("files"));
    for (std::string file; std::getline(in, file, ',');)
      if (!file.empty()) files.push_back(file);
  } else {
    GF_CHECK_AS(UsageError, std::filesystem::is_directory(f.str("model")), "average: --model '{}' is not a run folder", f.str("model"));
    files = train::epoch_weight_files(f.str("model"), static_cast<size_t>(f.integer("last")));
    GF_CHECK_AS(UsageError, !files.empty(), "average: '{}' keeps no epoch-NNNN.safetensors (train with --average-last K)", f.str("model"));
    if (out.empty()) out = (std::filesystem::path(f.str("model")) / "average.safetensors").string();
  }
  const SafetensorsFile mean = train::average_weights(files);
  save_safetensors(out, mean.tensors, mean.metadata);
  fmt::print("wrote {}: the mean of {} files ({} .. {})\n", out, files.size(), files.front(), files.back());
  return 0;
}

}  // namespace gf::app
