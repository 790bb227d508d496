// Checkpoint saves killed with SIGKILL: a process killed in the middle of saving a
// checkpoint never costs the previous checkpoint, and the temporary file it leaves is
// removed by the next save of that name. tests/helpers/save_loop.cpp saves 16 MB files
// over and over; this test kills it 30 times (10 under the sanitizers) and looks at what
// is left each time: even rounds at spread-out moments (any point of a save: serialising,
// writing, flushing, renaming), odd rounds as soon as the save's temporary file is seen,
// so that some kills land mid-write however short the write is next to the serialising
// on a given machine (under ASan the timed kills alone once all missed it).
#include <doctest/doctest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "kiln.h"
#include "test_util.h"

using namespace kiln;
namespace fs = std::filesystem;
using kiln::testing::ScratchDir;

extern char** environ;

namespace {

// save_loop started with stdout to a pipe; the read end is returned in `out`.
pid_t spawn_save_loop(const std::string& exe, const std::string& dir, FILE*& out) {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  std::vector<char*> argv = {const_cast<char*>(exe.c_str()), const_cast<char*>(dir.c_str()), nullptr};
  pid_t pid = 0;
  const int rc = ::posix_spawn(&pid, exe.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  REQUIRE_MESSAGE(rc == 0, "posix_spawn ", exe, " failed: ", rc);
  out = ::fdopen(fds[0], "r");
  REQUIRE(out != nullptr);
  return pid;
}

// The temporaries of ckpt.safetensors in dir (io::atomic_temp_path's names).
std::vector<std::string> temporaries(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir))
    if (io::is_atomic_temp_of(e.path().filename().string(), "ckpt.safetensors")) names.push_back(e.path().filename());
  return names;
}

// Waits (up to 20 s) until a temporary of ckpt.safetensors exists in dir.
bool wait_for_temporary(const fs::path& dir) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline) {
    if (!temporaries(dir).empty()) return true;
    std::this_thread::yield();
  }
  return false;
}

// True when the checkpoint is whole: save k's four tensors, every element k.
bool whole_checkpoint(const std::string& path, std::string& why) {
  io::SafetensorsContents c = io::load_safetensors(path);  // throws on a torn file
  const double k = std::stod(c.metadata.at("k"));
  for (const char* name : {"a", "b", "c", "d"}) {
    const Tensor& t = c.tensors.at(name);
    if (t.numel() != (1 << 20) || !equal(t, full_like(t, k))) {
      why = std::string("tensor ") + name + " is not all " + c.metadata.at("k");
      return false;
    }
  }
  return true;
}

}  // namespace

TEST_CASE("SIGKILL during checkpoint saves: the last whole checkpoint survives, the next save removes the temporary") {
  const char* exe = std::getenv("KILN_SAVE_LOOP");
  REQUIRE_MESSAGE(exe != nullptr, "KILN_SAVE_LOOP (the path of tests/helpers/save_loop) is not set; run under meson test");
  ScratchDir dir("kill_save");
  const std::string target = dir / "ckpt.safetensors";
  // 10 under the sanitizers, where each round (a 16 MB save first) takes seconds.
  constexpr int kKills = kiln::testing::kSanitized ? 10 : 30;
  int killed_mid_save = 0;     // kills that left a temporary behind
  int killed_mid_write = 0;    // of those, kills sent once the temporary was seen
  for (int round = 0; round < kKills; ++round) {
    CAPTURE(round);
    FILE* out = nullptr;
    const pid_t pid = spawn_save_loop(exe, dir.path.string(), out);
    char line[16] = {};
    const bool ready = std::fgets(line, sizeof line, out) != nullptr;  // the first save is done
    const bool on_sight = round % 2 == 1;
    if (on_sight) {
      CHECK_MESSAGE(wait_for_temporary(dir.path), "save_loop wrote no temporary within 20 s");
    } else {
      // 0-58 ms more of saving: a save takes tens of ms, so the kills land at every point
      // of one.
      std::this_thread::sleep_for(std::chrono::milliseconds((round * 7) % 59));
    }
    REQUIRE(::kill(pid, SIGKILL) == 0);
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    std::fclose(out);
    REQUIRE_MESSAGE(ready, "save_loop exited before its first save: status ", status);
    CHECK(WIFSIGNALED(status));

    std::string why;
    CHECK_MESSAGE(whole_checkpoint(target, why), why);
    if (!temporaries(dir.path).empty()) {
      ++killed_mid_save;
      if (on_sight) ++killed_mid_write;
    }
    // The next save of that name (here, by this process) removes the dead one's temporary.
    io::save_safetensors(target, {{"a", full({4}, 1.0)}});
    CHECK(temporaries(dir.path).empty());
  }
  MESSAGE(killed_mid_save, " of ", kKills, " kills landed mid-save (left a temporary), ", killed_mid_write,
          " of them sent on sight of the temporary");
  CHECK(killed_mid_write > 0);  // else no kill tested what a torn save leaves
}
