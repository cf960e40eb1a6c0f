"""The GRPO checkpoints' model card is the same bytes in every run: TRL lists its tags from a set, whose order
follows Python's hash seed (two quickstart builds in two folders differed in README.md alone)."""

from __future__ import annotations

import subprocess
import sys

from biocheck.train.grpo import PortableCardMixin, sorted_card_tags

CARD = "---\nlibrary_name: transformers\ntags:\n- trl\n- grpo\n- generated_from_trainer\nlicence: license\n---\n\n# Card\n- b\n- a\n"


def test_the_tags_are_sorted_and_nothing_else_moves():
    out = sorted_card_tags(CARD)
    assert out == CARD.replace("- trl\n- grpo\n- generated_from_trainer", "- generated_from_trainer\n- grpo\n- trl")
    assert out.endswith("# Card\n- b\n- a\n")  # a list outside the tags keeps its order
    assert sorted_card_tags("no front matter\n") == "no front matter\n"


def test_the_trainer_mixin_rewrites_the_card_trl_wrote(tmp_path):
    class Args:
        output_dir = str(tmp_path)

    class FakeTrl:
        args = Args()

        def create_model_card(self, model_name=None):
            (tmp_path / "README.md").write_text(CARD)

    class Trainer(PortableCardMixin, FakeTrl):
        pass

    Trainer().create_model_card(model_name="x")
    assert "tags:\n- generated_from_trainer\n- grpo\n- trl\n" in (tmp_path / "README.md").read_text()


def test_set_order_really_follows_the_hash_seed():
    # why the mixin exists: the same tags listed from a set under two hash seeds come out in different orders
    code = "print(list({'trl', 'grpo', 'generated_from_trainer', 'a', 'b', 'c', 'd'}))"
    orders = {subprocess.run([sys.executable, "-c", code], env={"PYTHONHASHSEED": str(seed)}, capture_output=True,
                             text=True, check=True).stdout for seed in range(8)}
    assert len(orders) > 1
