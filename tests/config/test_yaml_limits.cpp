// Bounded reading of hostile model files (issue 16): regular files under a size cap only, nodes,
// alias expansions and depth counted and capped, UTF-8 checked before parsing. Each hostile input
// is read in a child process with an alarm (and, outside ASan builds, a 4 GiB address-space
// limit), so a reader that blocks, loops or balloons fails the test instead of hanging or
// swapping the machine.
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <functional>
#include <string>

#include "config/value.h"
#include "config_test_util.h"
#include "support/catch.h"
#include "support/test_util.h"

using cnn::ConfigError;
using cnn::test::config_error;

namespace {

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAsan = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kAsan = true;
#else
constexpr bool kAsan = false;
#endif
#else
constexpr bool kAsan = false;
#endif

// Runs `read` in a child limited to `seconds` and 4 GiB of address space; the child exits 0 when
// `read` throws a ConfigError whose message contains `phrase`. Returns what happened, for CHECKs.
std::string bounded(const std::function<void()>& read, const std::string& phrase, unsigned seconds = 20) {
  const pid_t pid = fork();
  if (pid == 0) {
    alarm(seconds);
    if (!kAsan) {
      struct rlimit as{4ull << 30, 4ull << 30};
      setrlimit(RLIMIT_AS, &as);
    }
    int code = 3;
    try {
      read();
      code = 4;  // no error at all
    } catch (const ConfigError& e) {
      code = std::string(e.what()).find(phrase) != std::string::npos ? 0 : 5;
      if (code) fprintf(stderr, "unexpected message: %s\n", e.what());
    } catch (const std::exception& e) {
      fprintf(stderr, "not a ConfigError: %s\n", e.what());
      code = 6;
    }
    _exit(code);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFSIGNALED(status)) return fmt::format("killed by signal {} (SIGALRM {}: out of time)", WTERMSIG(status), SIGALRM);
  switch (WEXITSTATUS(status)) {
    case 0: return "ok";
    case 4: return "accepted";
    case 5: return "other ConfigError";
    case 6: return "not a ConfigError";
  }
  return fmt::format("exit {}", WEXITSTATUS(status));
}

// The 627-byte "billion laughs": nine levels of nine aliases, 9^9 strings when expanded.
std::string alias_bomb() {
  std::string s = "a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n";
  for (char c = 'b'; c <= 'i'; ++c) {
    const char p = char(c - 1);
    s += fmt::format("{0}: &{0} [*{1},*{1},*{1},*{1},*{1},*{1},*{1},*{1},*{1}]\n", c, p);
  }
  return s;
}

}  // namespace

TEST_CASE("an alias bomb fails fast within a 4 GiB address space", "[cpu]") {
  const std::string bomb = alias_bomb();
  CHECK(bomb.size() < 700);
  CHECK(bounded([&] { cnn::parse_yaml(bomb, "bomb.yaml"); }, "aliases expand to more than 65536 nodes") == "ok");
  // Aliases within the budget are expanded, each copy at its own path.
  cnn::Value v = cnn::parse_yaml("a: &x {k: 1}\nb: *x\n", "m.yaml");
  CHECK(v["b"]["k"].integer() == 1);
  CHECK(v["b"]["k"].path() == "b.k");
}

TEST_CASE("a recursive alias is refused", "[cpu]") {
  CHECK(bounded([] { cnn::parse_yaml("a: &a [1, *a]\n", "m.yaml"); }, "recursive alias") == "ok");
}

TEST_CASE("more YAML nodes than the cap are refused", "[cpu]") {
  std::string many = "a: [";
  for (size_t i = 0; i <= cnn::kMaxYamlNodes; ++i) many += "1,";
  many += "1]\n";
  REQUIRE(many.size() <= cnn::kMaxYamlBytes);
  CHECK(bounded([&] { cnn::parse_yaml(many, "m.yaml"); }, "more than 262144 YAML nodes") == "ok");
}

TEST_CASE("deep nesting is refused before it can exhaust the stack", "[cpu]") {
  const size_t n = 300000;
  const std::string deep = std::string(n, '[') + std::string(n, ']');
  CHECK(bounded([&] { cnn::parse_yaml("a: " + deep, "m.yaml"); }, "nested deeper than 64 levels") == "ok");
  const std::string maps = [&] {
    std::string m;
    for (size_t i = 0; i < n; ++i) m += "{b: ";
    return m + std::string(n, '}');
  }();
  CHECK(bounded([&] { cnn::parse_yaml("a: " + maps, "m.yaml"); }, "nested deeper than 64 levels") == "ok");
  // Never closed: refused one way or another, quickly.
  CHECK(bounded([&] { cnn::parse_yaml("a: " + std::string(n, '['), "m.yaml"); }, "m.yaml:") == "ok");
}

TEST_CASE("model files must be regular files under the size cap", "[cpu]") {
  cnn::test::TempDir dir;
  const std::string fifo = (dir / "model.yaml").string();
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  CHECK(bounded([&] { cnn::load_yaml_file(fifo); }, "it is a FIFO, expected a YAML file", 10) == "ok");
  CHECK(bounded([] { cnn::load_yaml_file("/dev/zero"); }, "it is a character device", 10) == "ok");
  // 2M layers (48 MB) and a file one byte over the cap: refused by their size.
  const std::string big = (dir / "big.yaml").string();
  {
    std::ofstream out(big);
    out << "name: big\ninput: {height: 8, width: 8}\nlayers:\n";
    for (int i = 0; i < 2000000; ++i) out << "  - {name: r, type: relu}\n";
  }
  CHECK(bounded([&] { cnn::load_yaml_file(big); }, "more than the limit of 4 MiB for a YAML file") == "ok");
  const std::string over = (dir / "over.yaml").string();
  cnn::test::write_text_file(over, "a: \"" + std::string(cnn::kMaxYamlBytes - 5, 'x') + "\"\n");
  CHECK(bounded([&] { cnn::load_yaml_file(over); }, "4194305 bytes") == "ok");
  CHECK(bounded([&] { cnn::parse_yaml(std::string(cnn::kMaxYamlBytes + 1, ' '), "m.yaml"); }, "4194305 bytes of YAML") ==
        "ok");
}

TEST_CASE("text that is not UTF-8 or holds control characters is refused at its line", "[cpu]") {
  ConfigError e = config_error([] { cnn::parse_yaml("a: 1\nname: caf\xe9\n", "m.yaml"); });
  CHECK(std::string(e.what()) == "m.yaml:2:10: the text is not valid UTF-8 (byte 0xe9); model files are UTF-8");
  CHECK(config_error([] { cnn::parse_yaml("a: \xc0\xaf\n", "m.yaml"); }).message().find("not valid UTF-8") != std::string::npos);  // overlong
  CHECK(config_error([] { cnn::parse_yaml("a: \xed\xa0\x80\n", "m.yaml"); }).message().find("not valid UTF-8") != std::string::npos);  // surrogate
  ConfigError nul = config_error([] { cnn::parse_yaml(std::string("a: x\0y\n", 7), "m.yaml"); });
  CHECK(std::string(nul.what()) == "m.yaml:1:5: control character U+0000 in the text (only tab, CR and LF are allowed)");
  // Well-formed UTF-8 of every length is fine.
  CHECK(cnn::parse_yaml("a: \"é€😀\"\n", "m.yaml")["a"].string() == "é€😀");
  // A --set value goes through the same reader.
  cnn::Value root = cnn::parse_yaml("a: 1\n", "m.yaml");
  CHECK(config_error([&] { cnn::apply_override(root, "a=\xff"); }).message().find("not valid UTF-8") != std::string::npos);
}
