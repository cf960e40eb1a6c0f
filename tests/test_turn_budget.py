"""train/turn_budget.py: a later turn generates no further than its rows' budgets, and keeps the same tokens."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")


def test_the_limit_is_the_most_any_row_may_still_keep():
    from biocheck.train.turn_budget import turn_limit

    prompts = [[1, 2, 3], [1, 2, 3], [7, 8, 9, 10, 11]]  # two groups' prompts, of two lengths
    rows = [[1, 2, 3] + [5] * 12, [7, 8, 9, 10, 11] + [6] * 4, [1, 2, 3] + [5] * 17]
    assert turn_limit(rows, prompts, budget=20) == 16  # the second row: 20 - 4
    assert turn_limit(rows[:1] + rows[2:], prompts, budget=20) == 8  # 20 - 12
    assert turn_limit([[1, 2, 3] + [5] * 25], prompts, budget=20) == 1  # over budget: TRL cuts it; one token
    assert turn_limit([[1, 2, 4, 5]], prompts, budget=20) is None  # no prompt it starts with: not capped
    # a prompt of another group that is as long and differs is not taken for this row's
    assert turn_limit([[7, 8, 9, 10, 12] + [6] * 4], prompts, budget=20) is None


class _Loop:
    """TRL's tool loop, reduced to what the mixin sees: the first turn, then one turn after the tool."""

    max_completion_length = 20
    use_vllm = False

    def __init__(self):
        from transformers import GenerationConfig

        self.generation_config = GenerationConfig(max_new_tokens=16)
        self.limits = []

    def _generate_single_turn(self, prompt_ids, *args, **kwargs):
        self.limits.append(self.generation_config.max_new_tokens)
        return [[4] for _ in prompt_ids], None

    def _tool_call_loop(self, prompts, prompt_ids, completion_ids, *args, **kwargs):
        rows = [p + c + [9] * 6 for p, c in zip(prompt_ids, completion_ids, strict=True)]  # + a tool result
        return self._generate_single_turn(rows)


@pytest.mark.parametrize("on", [True, False])
def test_a_turn_after_the_tool_is_capped_and_the_config_restored(on):
    from biocheck.train.turn_budget import TurnBudgetMixin

    class Trainer(TurnBudgetMixin, _Loop):
        turn_budget = on

    t = Trainer()
    prompts = [[1, 2, 3], [1, 2, 3]]
    t._generate_single_turn(prompts)  # the first turn: not in the loop, never capped
    t._tool_call_loop(None, prompts, [[5] * 4, [5] * 2])  # completions + tool: 10 and 8 of 20 used
    assert t.limits == ([16, 12] if on else [16, 16])
    assert t.generation_config.max_new_tokens == 16 and t._loop_prompts is None


@pytest.mark.parametrize("cache", [None, "static"])
def test_a_capped_turn_keeps_the_tokens_the_full_turn_keeps(tiny_model, cache):
    """Seeded sampling to 24 new tokens and cut at 10, against a turn capped at 10 (a smaller static cache too):
    the same tokens, from the same random state."""
    from transformers import AutoModelForCausalLM, GenerationConfig

    from biocheck.train.prompt_cache import PromptCache

    model = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32).eval()
    g = torch.Generator().manual_seed(2)
    ids = torch.randint(5, 500, (3, 40), generator=g)
    mask = torch.ones_like(ids)
    outs = {}
    for new in (24, 10):
        config = GenerationConfig(max_new_tokens=new, do_sample=True, temperature=1.0, top_k=0, pad_token_id=0,
                                  cache_implementation=cache)
        torch.manual_seed(5)
        outs[new] = PromptCache().generate(model.generate, model, 0, input_ids=ids, attention_mask=mask,
                                           generation_config=config)[:, 40:]
    assert outs[24].size(1) == 24 and outs[10].size(1) == 10
    assert torch.equal(outs[24][:, :10], outs[10])

