#!/usr/bin/env python3
"""Checkpoint folders of the ecosystem (see README.md for which library wrote each). Run
inside the oracle chroot (with transformers and accelerate) from the repository root:

    scripts/oracle python testdata/ecosystem/gen_folders.py

Writes into testdata/ecosystem/folders/:
  trainer/checkpoint-2/  a real transformers Trainer checkpoint (tiny Llama, 2 AdamW steps
                         on the CPU): model.safetensors, config.json, optimizer.pt,
                         scheduler.pt, rng_state.pth, trainer_state.json, training_args.bin
  peft/                  a PEFT LoRA adapter folder as peft's save_pretrained writes it
  pipeline/              a diffusers pipeline root as DiffusionPipeline.save_pretrained
                         writes it: model_index.json, unet/, vae/, text_encoder/ (a real
                         transformers CLIPTextModel), tokenizer/, scheduler/
  lora_kohya.safetensors a LoRA file with kohya / modelspec __metadata__
and folders.json: torch's listing of every weights file, and the metadata of each
safetensors file.
"""
import json
import os
import shutil
import sys

import torch
from safetensors import safe_open
from safetensors.torch import save_file

sys.path.insert(0, os.path.dirname(__file__))
from common import listing  # noqa: E402

OUT = "testdata/ecosystem/folders"


def tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
                      num_key_value_heads=1, max_position_embeddings=32, tie_word_embeddings=False)
    torch.manual_seed(0)
    return LlamaForCausalLM(cfg)


def trainer():
    from transformers import Trainer, TrainingArguments

    class Tokens(torch.utils.data.Dataset):
        def __len__(self):
            return 8

        def __getitem__(self, i):
            ids = torch.arange(i, i + 8) % 64
            return {"input_ids": ids, "labels": ids}

    out = os.path.join(OUT, "trainer")
    shutil.rmtree(out, ignore_errors=True)
    args = TrainingArguments(output_dir=out, max_steps=2, save_steps=2, per_device_train_batch_size=4,
                             learning_rate=1e-3, lr_scheduler_type="cosine", warmup_steps=1, report_to=[],
                             use_cpu=True, seed=0, logging_strategy="no")
    Trainer(model=tiny_llama(), args=args, train_dataset=Tokens()).train()
    return os.path.join(out, "checkpoint-2")


def peft():
    """PEFT 0.17's save_pretrained of a LoRA adapter (peft/peft_model.py, utils/save_and_load.py):
    adapter_config.json (LoraConfig.to_dict()) and adapter_model.safetensors with the lora_A /
    lora_B weights under base_model.model.…, metadata {"format": "pt"}."""
    out = os.path.join(OUT, "peft")
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(1)
    sd = {}
    for layer in range(2):
        for proj, (i, o) in (("q_proj", (16, 16)), ("v_proj", (16, 8))):
            pre = f"base_model.model.model.layers.{layer}.self_attn.{proj}"
            sd[pre + ".lora_A.weight"] = torch.randn(4, i)
            sd[pre + ".lora_B.weight"] = torch.randn(o, 4)
    save_file(sd, os.path.join(out, "adapter_model.safetensors"), metadata={"format": "pt"})
    config = {"alpha_pattern": {}, "auto_mapping": None, "base_model_name_or_path": "tiny-llama", "bias": "none",
              "fan_in_fan_out": False, "inference_mode": True, "init_lora_weights": True, "layers_pattern": None,
              "layers_to_transform": None, "lora_alpha": 8, "lora_dropout": 0.0, "modules_to_save": None,
              "peft_type": "LORA", "r": 4, "rank_pattern": {}, "revision": None, "target_modules": ["q_proj", "v_proj"],
              "task_type": "CAUSAL_LM", "use_dora": False, "use_rslora": False}
    with open(os.path.join(out, "adapter_config.json"), "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)
    with open(os.path.join(out, "README.md"), "w") as f:
        f.write("---\nbase_model: tiny-llama\nlibrary_name: peft\n---\n")
    return out


def pipeline():
    """diffusers 0.35's DiffusionPipeline.save_pretrained: model_index.json naming each
    component, and a folder per component saved by its own save_pretrained."""
    from transformers import CLIPTextConfig, CLIPTextModel
    out = os.path.join(OUT, "pipeline")
    shutil.rmtree(out, ignore_errors=True)
    index = {"_class_name": "StableDiffusionPipeline", "_diffusers_version": "0.35.1",
             "feature_extractor": [None, None], "image_encoder": [None, None], "requires_safety_checker": False,
             "safety_checker": [None, None], "scheduler": ["diffusers", "DDIMScheduler"],
             "text_encoder": ["transformers", "CLIPTextModel"], "tokenizer": ["transformers", "CLIPTokenizer"],
             "unet": ["diffusers", "UNet2DConditionModel"], "vae": ["diffusers", "AutoencoderKL"]}
    os.makedirs(out)
    with open(os.path.join(out, "model_index.json"), "w") as f:
        json.dump(index, f, indent=2, sort_keys=True)
    torch.manual_seed(2)
    # diffusers' ModelMixin.save_pretrained: config.json and diffusion_pytorch_model.safetensors
    # (safetensors.torch.save_file with metadata {"format": "pt"}).
    models = {
        "unet": ({"_class_name": "UNet2DConditionModel", "_diffusers_version": "0.35.1", "in_channels": 4, "out_channels": 4,
                  "block_out_channels": [8], "cross_attention_dim": 16, "sample_size": 8},
                 {"conv_in.weight": torch.randn(8, 4, 3, 3), "conv_in.bias": torch.randn(8),
                  "time_embedding.linear_1.weight": torch.randn(16, 8), "time_embedding.linear_1.bias": torch.randn(16),
                  "conv_out.weight": torch.randn(4, 8, 3, 3).half(), "conv_out.bias": torch.randn(4).half()}),
        "vae": ({"_class_name": "AutoencoderKL", "_diffusers_version": "0.35.1", "latent_channels": 4, "block_out_channels": [8],
                 "scaling_factor": 0.18215},
                {"encoder.conv_in.weight": torch.randn(8, 3, 3, 3), "encoder.conv_in.bias": torch.randn(8),
                 "decoder.conv_out.weight": torch.randn(3, 8, 3, 3), "decoder.conv_out.bias": torch.randn(3)}),
    }
    for name, (config, sd) in models.items():
        os.makedirs(os.path.join(out, name))
        with open(os.path.join(out, name, "config.json"), "w") as f:
            json.dump(config, f, indent=2, sort_keys=True)
        save_file(sd, os.path.join(out, name, "diffusion_pytorch_model.safetensors"), metadata={"format": "pt"})
    te = CLIPTextModel(CLIPTextConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                      num_attention_heads=2, max_position_embeddings=16, projection_dim=16))
    te.save_pretrained(os.path.join(out, "text_encoder"))
    os.makedirs(os.path.join(out, "tokenizer"))
    with open(os.path.join(out, "tokenizer", "vocab.json"), "w") as f:
        json.dump({f"t{i}</w>": i for i in range(64)}, f)
    with open(os.path.join(out, "tokenizer", "merges.txt"), "w") as f:
        f.write("#version: 0.2\n")
    with open(os.path.join(out, "tokenizer", "tokenizer_config.json"), "w") as f:
        json.dump({"model_max_length": 16, "tokenizer_class": "CLIPTokenizer"}, f, indent=2)
    os.makedirs(os.path.join(out, "scheduler"))
    with open(os.path.join(out, "scheduler", "scheduler_config.json"), "w") as f:
        json.dump({"_class_name": "DDIMScheduler", "_diffusers_version": "0.35.1", "beta_schedule": "scaled_linear",
                   "num_train_timesteps": 1000}, f, indent=2, sort_keys=True)
    return out


def kohya():
    """A LoRA as kohya's sd-scripts saves it (networks/lora.py save_weights): lora_unet_…
    tensors in fp16, and training metadata (ss_*) with modelspec fields and a hash."""
    torch.manual_seed(3)
    sd = {"lora_unet_down_blocks_0_attentions_0_proj_in.lora_down.weight": torch.randn(4, 8).half(),
          "lora_unet_down_blocks_0_attentions_0_proj_in.lora_up.weight": torch.randn(8, 4).half(),
          "lora_unet_down_blocks_0_attentions_0_proj_in.alpha": torch.tensor(4.0).half()}
    md = {"ss_network_module": "networks.lora", "ss_network_dim": "4", "ss_network_alpha": "4.0",
          "ss_learning_rate": "0.0001", "ss_training_comment": "ünïcode ✓", "modelspec.sai_model_spec": "1.0.0",
          "modelspec.architecture": "stable-diffusion-v1/lora", "modelspec.title": "tiny lora",
          "sshs_model_hash": "0123456789abcdef", "format": "pt"}
    path = os.path.join(OUT, "lora_kohya.safetensors")
    save_file(sd, path, metadata=md)
    return path


def metadata(path):
    with safe_open(path, "pt") as f:
        return f.metadata()


def main():
    os.makedirs(OUT, exist_ok=True)
    expected = {"torch": torch.__version__}
    ck = trainer()
    expected["trainer"] = {f: listing(torch.load(os.path.join(ck, f), weights_only=False))
                           for f in ("optimizer.pt", "scheduler.pt", "rng_state.pth")}
    from safetensors.torch import load_file
    expected["trainer"]["model.safetensors"] = listing(load_file(os.path.join(ck, "model.safetensors")))
    p = peft()
    expected["peft"] = {"adapter_model.safetensors": listing(load_file(os.path.join(p, "adapter_model.safetensors")))}
    pipe = pipeline()
    expected["pipeline"] = {}
    for comp, file in (("unet", "diffusion_pytorch_model.safetensors"), ("vae", "diffusion_pytorch_model.safetensors"),
                       ("text_encoder", "model.safetensors")):
        expected["pipeline"][comp] = {"file": file, "tensors": listing(load_file(os.path.join(pipe, comp, file))),
                                      "metadata": metadata(os.path.join(pipe, comp, file))}
    k = kohya()
    expected["lora_kohya.safetensors"] = {"tensors": listing(load_file(k)), "metadata": metadata(k)}
    with open("testdata/ecosystem/folders.json", "w") as f:
        json.dump(expected, f, indent=1)
        f.write("\n")


main()
