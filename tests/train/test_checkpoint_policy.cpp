// Which checkpoints a run writes after each epoch (train.checkpoint) and how the best val metric
// is tracked; the writing itself is covered end to end (tests/app).
#include <string>
#include <vector>

#include "support/catch.h"
#include "train/checkpoint_policy.h"

using namespace cnn;

TEST_CASE("after each epoch: last, best when it improved, epoch-NNNN every every_epochs", "[cpu]") {
  CheckpointSpec spec;
  spec.every_epochs = 2;
  const CheckpointPolicy policy(spec, "");
  CHECK(policy.after_epoch(0, false) == std::vector<std::string>{"last"});
  CHECK(policy.after_epoch(0, true) == std::vector<std::string>{"last", "best"});
  CHECK(policy.after_epoch(1, false) == std::vector<std::string>{"last", "epoch-0002"});
  CHECK(policy.after_epoch(3, true) == std::vector<std::string>{"last", "best", "epoch-0004"});
  spec.every_epochs = 0;
  CHECK(CheckpointPolicy(spec, "").after_epoch(1, true) == std::vector<std::string>{"last", "best"});
  CHECK_FALSE(policy.enabled());  // no directory: a rank other than 0
}

TEST_CASE("the best val metric is the lowest loss or the highest accuracy, and a resume restores it", "[cpu]") {
  CheckpointSpec spec;
  spec.best_metric = "val_loss";
  CheckpointPolicy by_loss(spec, "");
  CHECK_FALSE(by_loss.has_best());
  CHECK(by_loss.improves(0.9));  // the first value always does
  CHECK_FALSE(by_loss.improves(1.2));
  CHECK_FALSE(by_loss.improves(0.9));  // equal is no improvement
  CHECK(by_loss.improves(0.5));
  CHECK(by_loss.best() == 0.5);
  spec.best_metric = "val_acc";
  CheckpointPolicy by_acc(spec, "");
  CHECK(by_acc.improves(0.3));
  CHECK_FALSE(by_acc.improves(0.2));
  CHECK(by_acc.improves(0.4));
  CheckpointPolicy resumed(spec, "");
  resumed.restore_best(true, 0.4);
  CHECK_FALSE(resumed.improves(0.35));
  CHECK(resumed.improves(0.41));
}
