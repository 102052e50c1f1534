// Learning-rate schedules at chosen steps against their closed forms, and the plateau state machine.
// Unless stated: 10 steps per epoch, 10 epochs (T = 100 steps), base lr 1.
#include <cmath>
#include <map>
#include <string>

#include "core/error.h"
#include "optim/schedule.h"
#include "support/catch.h"

using namespace cnn;

namespace {

constexpr double kPi = 3.14159265358979323846;

ScheduleSpec spec_of(const std::string& type) {
  ScheduleSpec s;
  s.type = type;
  return s;
}

}  // namespace

TEST_CASE("constant schedule warms up linearly from the start factor over fractional epochs", "[cpu]") {
  // warmup 0.5 epochs of 10 steps: W = 5; lr = 0.1 * (0.2 + 0.8 * step / 5) for step < 5.
  ScheduleSpec s = spec_of("constant");
  s.warmup_epochs = 0.5;
  s.warmup_start_factor = 0.2;
  LrSchedule sched(s, 0.1, 10, 10);
  CHECK(sched.warmup_steps() == 5);
  CHECK(sched.lr(0) == Approx(0.02));
  CHECK(sched.lr(1) == Approx(0.036));
  CHECK(sched.lr(4) == Approx(0.084));
  CHECK(sched.lr(5) == Approx(0.1));
  CHECK(sched.lr(99) == Approx(0.1));
  // 0.25 epochs of 8 steps: W = 2, start factor 0 -> 0, half, full.
  s.warmup_epochs = 0.25;
  s.warmup_start_factor = 0.0;
  LrSchedule quarter(s, 1.0, 8, 3);
  CHECK(quarter.lr(0) == 0.0);
  CHECK(quarter.lr(1) == Approx(0.5));
  CHECK(quarter.lr(2) == Approx(1.0));
}

TEST_CASE("step schedule decays by gamma every step_size epochs at epoch boundaries", "[cpu]") {
  ScheduleSpec s = spec_of("step");
  s.step_size = 3;
  s.gamma = 0.1;
  LrSchedule sched(s, 1.0, 10, 10);
  CHECK(sched.lr(0) == Approx(1.0));
  CHECK(sched.lr(29) == Approx(1.0));   // epoch 2
  CHECK(sched.lr(30) == Approx(0.1));   // epoch 3
  CHECK(sched.lr(59) == Approx(0.1));   // epoch 5
  CHECK(sched.lr(60) == Approx(0.01));  // epoch 6
  CHECK(sched.lr(99) == Approx(0.001)); // epoch 9
}

TEST_CASE("multistep schedule decays at each milestone epoch", "[cpu]") {
  ScheduleSpec s = spec_of("multistep");
  s.milestones = {2, 5};
  s.gamma = 0.5;
  LrSchedule sched(s, 1.0, 10, 10);
  CHECK(sched.lr(19) == Approx(1.0));
  CHECK(sched.lr(20) == Approx(0.5));
  CHECK(sched.lr(49) == Approx(0.5));
  CHECK(sched.lr(50) == Approx(0.25));
  CHECK(sched.lr(99) == Approx(0.25));
  s.milestones = {5, 2};
  CHECK_THROWS_AS(LrSchedule(s, 1.0, 10, 10), Error);
}

TEST_CASE("exponential schedule multiplies by gamma once per epoch", "[cpu]") {
  ScheduleSpec s = spec_of("exponential");
  s.gamma = 0.9;
  LrSchedule sched(s, 1.0, 10, 10);
  CHECK(sched.lr(0) == Approx(1.0));
  CHECK(sched.lr(9) == Approx(1.0));
  CHECK(sched.lr(10) == Approx(0.9));
  CHECK(sched.lr(35) == Approx(0.729));
}

TEST_CASE("cosine schedule goes from lr to min_lr over the whole run with warmup applied on top", "[cpu]") {
  // lr(t) = 0.1 + 0.9 * 0.5 * (1 + cos(pi t / 100))
  ScheduleSpec s = spec_of("cosine");
  s.min_lr = 0.1;
  LrSchedule sched(s, 1.0, 10, 10);
  CHECK(sched.lr(0) == Approx(1.0));
  CHECK(sched.lr(25) == Approx(0.1 + 0.45 * (1.0 + std::sqrt(0.5))));
  CHECK(sched.lr(50) == Approx(0.55));
  CHECK(sched.lr(100) == Approx(0.1));
  CHECK(sched.lr(150) == Approx(0.1));  // past the end: stays at the floor
  // One epoch of warmup from 0: lr(5) = cosine(5) * 5/10.
  s.warmup_epochs = 1.0;
  LrSchedule warm(s, 1.0, 10, 10);
  CHECK(warm.lr(0) == 0.0);
  CHECK(warm.lr(5) == Approx(0.5 * (0.1 + 0.45 * (1.0 + std::cos(kPi * 0.05)))));
  CHECK(warm.lr(10) == Approx(0.1 + 0.45 * (1.0 + std::cos(kPi * 0.1))));
}

TEST_CASE("schedules map epochs to steps with their own steps per epoch", "[cpu]") {
  // A run resumed at epoch 3 with 4 steps per epoch instead of 10 recomputes its step.
  ScheduleSpec s = spec_of("step");
  s.step_size = 3;
  s.gamma = 0.5;
  LrSchedule sched(s, 1.0, 4, 10);
  CHECK(sched.step_at(3, 0) == 12);
  CHECK(sched.epoch_of(11) == 2);
  CHECK(sched.lr(sched.step_at(2, 3)) == Approx(1.0));
  CHECK(sched.lr(sched.step_at(3, 0)) == Approx(0.5));
  CHECK(sched.total_steps() == 40);
}

TEST_CASE("plateau reduces after patience bad epochs, honours threshold and min_lr", "[cpu]") {
  ScheduleSpec s = spec_of("plateau");
  s.factor = 0.5;
  s.patience = 2;
  s.threshold = 0.1;
  s.min_lr = 0.2;
  LrSchedule sched(s, 1.0, 10, 20);
  auto end = [&](int64_t epoch, double metric) {
    sched.on_epoch_end(epoch, metric);
    return sched.lr(100);
  };
  CHECK(end(0, 1.0) == Approx(1.0));   // first epoch: best = 1.0
  CHECK(end(1, 0.95) == Approx(1.0));  // 0.95 is not below 1.0*(1-0.1): bad 1
  CHECK(end(2, 0.92) == Approx(1.0));  // bad 2 = patience: not yet
  CHECK(end(3, 0.91) == Approx(0.5));  // bad 3 > patience: reduce, count restarts
  CHECK(end(4, 0.85) == Approx(0.5));  // 0.85 < 0.9: improvement, best = 0.85
  CHECK(end(5, 0.85) == Approx(0.5));
  CHECK(end(6, 0.85) == Approx(0.5));
  CHECK(end(7, 0.85) == Approx(0.25));
  CHECK(end(8, 0.85) == Approx(0.25));
  CHECK(end(9, 0.85) == Approx(0.25));
  CHECK(end(10, 0.85) == Approx(0.2));  // max(0.125, min_lr)
  for (int64_t e = 11; e < 14; ++e) CHECK(end(e, 0.85) == Approx(0.2));
  CHECK_THROWS_AS(sched.on_epoch_end(13, 0.5), Error);
}

TEST_CASE("plateau on val_acc treats higher as better", "[cpu]") {
  ScheduleSpec s = spec_of("plateau");
  s.monitor = "val_acc";
  s.factor = 0.1;
  s.patience = 1;
  s.threshold = 0.0;
  LrSchedule sched(s, 1.0, 10, 20);
  sched.on_epoch_end(0, 0.5);
  sched.on_epoch_end(1, 0.6);  // better
  sched.on_epoch_end(2, 0.4);  // bad 1
  CHECK(sched.lr(0) == Approx(1.0));
  sched.on_epoch_end(3, 0.6);  // equal is not better: bad 2 -> reduce
  CHECK(sched.lr(0) == Approx(0.1));
}

TEST_CASE("plateau state round-trips exactly and continues identically", "[cpu]") {
  ScheduleSpec s = spec_of("plateau");
  s.factor = 0.3;
  s.patience = 1;
  LrSchedule a(s, 0.7, 10, 20);
  const double metrics[] = {1.0, 0.9, 0.95, 0.97, 0.96, 0.8, 0.81, 0.82, 0.83, 0.84};
  for (int e = 0; e < 5; ++e) a.on_epoch_end(e, metrics[e]);
  std::map<std::string, std::string> st = a.state();
  CHECK(st.at("type") == "plateau");
  CHECK(st.at("last_epoch") == "4");
  CHECK(st.at("plateau_best") == "0.9");
  CHECK(st.at("plateau_bad_epochs") == "1");  // 0.95, 0.97 reduced; 0.96 is the next bad epoch
  CHECK(std::stod(st.at("plateau_factor")) == Approx(0.3));

  LrSchedule b(s, 0.7, 10, 20);
  b.load_state(st);
  CHECK(b.state() == st);
  for (int e = 5; e < 10; ++e) {
    a.on_epoch_end(e, metrics[e]);
    b.on_epoch_end(e, metrics[e]);
    CHECK(a.lr(0) == b.lr(0));
  }
  CHECK(a.state() == b.state());
  CHECK(a.lr(0) < 0.7 * 0.3);  // a second reduction happened after the resume point

  // A fresh plateau schedule's initial best (+inf) survives the text form too.
  LrSchedule fresh(s, 0.7, 10, 20), copy(s, 0.7, 10, 20);
  copy.load_state(fresh.state());
  CHECK(copy.state() == fresh.state());

  LrSchedule cosine(spec_of("cosine"), 0.7, 10, 20);
  CHECK_THROWS_AS(cosine.load_state(st), Error);
  st.erase("plateau_best");
  CHECK_THROWS_AS(b.load_state(st), Error);
}

TEST_CASE("schedule rejects an unknown type naming the closest one", "[cpu]") {
  std::string message;
  try {
    LrSchedule(spec_of("cosin"), 1.0, 10, 10);
  } catch (const Error& e) {
    message = e.what();
  }
  CHECK(message.find("did you mean 'cosine'") != std::string::npos);
  CHECK_THROWS_AS(LrSchedule(spec_of("constant"), 1.0, 0, 10), Error);
}

TEST_CASE("learning-rate scaling: none keeps it, linear multiplies by the world, sqrt by its root", "[cpu]") {
  CHECK(scaled_learning_rate("none", 0.1, 8) == 0.1);
  CHECK(scaled_learning_rate("linear", 0.1, 8) == Approx(0.8));
  CHECK(scaled_learning_rate("sqrt", 0.1, 4) == Approx(0.2));
  CHECK(scaled_learning_rate("sqrt", 0.1, 2) == Approx(0.1 * std::sqrt(2.0)));
  CHECK(scaled_learning_rate("linear", 0.05, 1) == 0.05);
  CHECK_THROWS_WITH(scaled_learning_rate("cubic", 0.1, 2), Catch::Matchers::Contains("none, linear or sqrt"));
}

TEST_CASE("a run's schedule scales train.optimizer.lr for the world, then warms up and decays it", "[cpu]") {
  TrainSpec t;
  t.epochs = 10;
  t.optimizer.lr = 0.05;
  t.lr_scaling = "linear";
  t.schedule = spec_of("cosine");
  t.schedule.warmup_epochs = 1;
  t.schedule.warmup_start_factor = 0.1;
  const LrSchedule run(t, 4, 10);
  CHECK(run.base_lr() == Approx(0.2));
  // The same numbers as the schedule built on the scaled base by hand, warmup and decay included.
  const LrSchedule by_hand(t.schedule, 0.05 * 4, 10, 10);
  for (int64_t step : {0, 3, 9, 10, 55, 99, 100}) CHECK(run.lr(step) == by_hand.lr(step));
  CHECK(run.lr(0) == Approx(0.2 * 0.1));
  // lr_at counts with this schedule's epoch length.
  CHECK(run.lr_at(5, 5) == run.lr(55));
  t.lr_scaling = "none";
  CHECK(LrSchedule(t, 4, 10).base_lr() == 0.05);
  t.lr_scaling = "sqrt";
  CHECK(LrSchedule(t, 4, 10).lr(50) == Approx(LrSchedule(t.schedule, 0.1, 10, 10).lr(50)));
}
