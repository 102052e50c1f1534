// Early stopping's rule: patience epochs in a row without an improvement by more than min_delta,
// in the right direction per metric; off at patience 0; its state survives a round trip.
#include "support/catch.h"
#include "train/early_stopping.h"

using namespace cnn;

namespace {

EarlyStoppingSpec spec(const std::string& metric, int64_t patience, double min_delta) {
  EarlyStoppingSpec s;
  s.metric = metric;
  s.patience = patience;
  s.min_delta = min_delta;
  return s;
}

// The epoch (1-based) after which training stops, or 0 when it runs through all values.
int64_t stop_epoch(EarlyStopping es, const std::vector<double>& values) {
  for (size_t i = 0; i < values.size(); ++i)
    if (es.update(int64_t(i) + 1, values[i])) return int64_t(i) + 1;
  return 0;
}

}  // namespace

TEST_CASE("early stopping waits patience epochs without an improvement larger than min_delta", "[cpu]") {
  // val_loss must fall: 0.95 is not a fall by more than 0.1 from 1.0, 0.85 is.
  CHECK(stop_epoch(EarlyStopping(spec("val_loss", 2, 0.1)), {1.0, 0.95, 0.85, 0.8, 0.9, 2.0}) == 5);
  CHECK(stop_epoch(EarlyStopping(spec("val_loss", 2, 0.0)), {1.0, 0.95, 0.94, 0.93, 0.92}) == 0);
  // val_acc and val_macro_f1 must rise.
  CHECK(stop_epoch(EarlyStopping(spec("val_acc", 1, 0.0)), {0.5, 0.6, 0.6}) == 3);
  CHECK(stop_epoch(EarlyStopping(spec("val_macro_f1", 1, 0.0)), {0.5, 0.4}) == 2);
  CHECK(stop_epoch(EarlyStopping(spec("val_macro_f1", 3, 0.0)), {0.5, 0.4, 0.45, 0.51, 0.3, 0.3, 0.3}) == 7);
  // patience 0 is off, whatever the values.
  EarlyStopping off(spec("val_loss", 0, 0.0));
  CHECK_FALSE(off.enabled());
  CHECK(stop_epoch(off, {1, 2, 3, 4, 5}) == 0);
}

TEST_CASE("early stopping resumes its count from its saved state and names the reason", "[cpu]") {
  EarlyStopping a(spec("val_acc", 3, 0.01));
  a.update(1, 0.50);
  a.update(2, 0.505);  // not by more than 0.01
  EarlyStopping b(spec("val_acc", 3, 0.01));
  b.load_state(a.state());
  CHECK_FALSE(b.update(3, 0.45));
  CHECK(b.update(4, 0.51));
  CHECK(b.reason() == "val_acc has not improved by more than 0.01 for 3 epochs (best 0.5 after epoch 1)");
  // A state kept for another metric starts the count afresh.
  EarlyStopping c(spec("val_loss", 1, 0.0));
  c.load_state(a.state());
  CHECK_FALSE(c.update(3, 0.7));
}
