"""Small models built the way real architectures are, for torch.save(model) (issue 23).

What matters is what their pickles hold, which is what the real ones hold:
functions kept as values in a module's attributes, and functools.partial
objects binding a layer's constructor:

  * transformers' GELUActivation keeps `self.act = nn.functional.gelu`, which
    pickles as a reference to torch._C._nn.gelu (BERT, Whisper, ViT-MAE, ...);
  * torchvision's VisionTransformer keeps `norm_layer = partial(nn.LayerNorm,
    eps=1e-6)`; ConvNeXt binds LayerNorm2d the same way;
  * torch's own nn.TransformerEncoderLayer keeps `self.activation = F.relu`
    (torch.nn.functional.relu) or F.gelu;
  * Llama keeps a rotary embedding's inv_freq as a non-persistent buffer (not
    in its state_dict) and SiLU activations; T5 a ReLU and a relative
    attention bias.

Tests import this module to save the models and to load them back with
weights_only=False (the pickles name `whole_models.X`).
"""

import functools

import torch
import torch.nn as nn
import torch.nn.functional as F


class GELUActivation(nn.Module):
    """transformers.activations.GELUActivation: the function is an attribute."""

    def __init__(self):
        super().__init__()
        self.act = F.gelu

    def forward(self, x):
        return self.act(x)


class BertLayer(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.query, self.key, self.value = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.attention_norm = nn.LayerNorm(dim, eps=1e-12)
        self.intermediate = nn.Linear(dim, 4 * dim)
        self.intermediate_act_fn = GELUActivation()
        self.output = nn.Linear(4 * dim, dim)
        self.output_norm = nn.LayerNorm(dim, eps=1e-12)

    def forward(self, x):
        q, k, v = self.query(x), self.key(x), self.value(x)
        a = torch.softmax(q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5, dim=-1) @ v
        x = self.attention_norm(x + a)
        return self.output_norm(x + self.output(self.intermediate_act_fn(self.intermediate(x))))


class BertLike(nn.Module):
    def __init__(self, vocab=50, dim=16, layers=2):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab, dim)
        self.position_embeddings = nn.Embedding(32, dim)
        self.embeddings_norm = nn.LayerNorm(dim, eps=1e-12)
        self.layer = nn.ModuleList([BertLayer(dim) for _ in range(layers)])
        self.pooler = nn.Sequential(nn.Linear(dim, dim), nn.Tanh())
        self.register_buffer("position_ids", torch.arange(32).expand((1, -1)), persistent=False)

    def example(self):
        return torch.randint(0, 50, (2, 7), generator=torch.Generator().manual_seed(1))

    def forward(self, ids):
        x = self.embeddings_norm(self.word_embeddings(ids) + self.position_embeddings(self.position_ids[:, :ids.shape[1]]))
        for layer in self.layer:
            x = layer(x)
        return self.pooler(x[:, 0])


class WhisperLike(nn.Module):
    """Convolutions, then encoder layers whose activation is a GELUActivation."""

    def __init__(self, mels=8, dim=16):
        super().__init__()
        self.conv1 = nn.Conv1d(mels, dim, 3, padding=1)
        self.conv2 = nn.Conv1d(dim, dim, 3, stride=2, padding=1)
        self.embed_positions = nn.Embedding(16, dim)
        self.fc1, self.fc2 = nn.Linear(dim, 2 * dim), nn.Linear(2 * dim, dim)
        self.activation_fn = GELUActivation()
        self.layer_norm = nn.LayerNorm(dim)

    def example(self):
        return torch.randn(2, 8, 20, generator=torch.Generator().manual_seed(2))

    def forward(self, features):
        x = F.gelu(self.conv2(F.gelu(self.conv1(features)))).permute(0, 2, 1)
        x = x + self.embed_positions.weight[:x.shape[1]]
        return self.layer_norm(x + self.fc2(self.activation_fn(self.fc1(x))))


class EncoderBlock(nn.Module):
    """torchvision.models.vision_transformer.EncoderBlock: norms made by norm_layer."""

    def __init__(self, dim, norm_layer):
        super().__init__()
        self.ln_1 = norm_layer(dim)
        self.self_attention = nn.MultiheadAttention(dim, 2, batch_first=True)
        self.ln_2 = norm_layer(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x):
        y = self.ln_1(x)
        x = x + self.self_attention(y, y, y, need_weights=False)[0]
        return x + self.mlp(self.ln_2(x))


class ViTLike(nn.Module):
    """torchvision's VisionTransformer keeps the partial it builds its norms with."""

    def __init__(self, dim=16, layers=2, norm_layer=functools.partial(nn.LayerNorm, eps=1e-6)):
        super().__init__()
        self.norm_layer = norm_layer
        self.conv_proj = nn.Conv2d(3, dim, 4, stride=4)
        self.class_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embedding = nn.Parameter(torch.randn(1, 5, dim) * 0.02)
        self.layers = nn.Sequential(*[EncoderBlock(dim, norm_layer) for _ in range(layers)])
        self.ln = norm_layer(dim)
        self.heads = nn.Sequential(nn.Linear(dim, 10))

    def example(self):
        return torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(3))

    def forward(self, images):
        x = self.conv_proj(images).flatten(2).transpose(1, 2)
        x = torch.cat([self.class_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embedding
        return self.heads(self.ln(self.layers(x))[:, 0])


class ConvNeXtLike(nn.Module):
    """A partial of a partial (timm and torchvision bind norm layers twice over)."""

    def __init__(self, dim=8):
        super().__init__()
        norm = functools.partial(functools.partial(nn.GroupNorm, 1), eps=1e-6)
        self.norm_layer = norm
        self.stem = nn.Sequential(nn.Conv2d(3, dim, 2, stride=2), norm(dim))
        self.block = nn.Sequential(nn.Conv2d(dim, dim, 3, padding=1, groups=dim), norm(dim), nn.Conv2d(dim, dim, 1))
        self.layer_scale = nn.Parameter(torch.full((dim, 1, 1), 1e-6))

    def example(self):
        return torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(4))

    def forward(self, x):
        x = self.stem(x)
        return x + self.layer_scale * self.block(x)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.variance_epsilon = eps

    def forward(self, x):
        return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)


class LlamaLike(nn.Module):
    """RMSNorm, a rotary embedding's non-persistent inv_freq, SiLU gates, a tied head."""

    def __init__(self, vocab=40, dim=16):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, dim)
        self.register_buffer("inv_freq", 1.0 / (10000 ** (torch.arange(0, dim, 2).float() / dim)), persistent=False)
        self.input_layernorm = RMSNorm(dim)
        self.gate_proj, self.up_proj = nn.Linear(dim, 2 * dim, bias=False), nn.Linear(dim, 2 * dim, bias=False)
        self.down_proj = nn.Linear(2 * dim, dim, bias=False)
        self.act_fn = nn.SiLU()
        self.silu = F.silu  # a python function of torch.nn.functional, kept as a value
        self.norm = RMSNorm(dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)
        self.lm_head.weight = self.embed_tokens.weight  # tied, as in many LLMs

    def example(self):
        return torch.randint(0, 40, (2, 5), generator=torch.Generator().manual_seed(5))

    def forward(self, ids):
        x = self.embed_tokens(ids)
        angles = torch.arange(ids.shape[1]).float()[:, None] * self.inv_freq[None, :]
        x = x + torch.cat([angles.sin(), angles.cos()], dim=-1)
        h = self.input_layernorm(x)
        x = x + self.down_proj(self.act_fn(self.gate_proj(h)) * self.silu(self.up_proj(h)))
        return self.lm_head(self.norm(x))


class T5Like(nn.Module):
    """torch's own TransformerEncoder (its layers keep F.relu as `activation`)
    and a T5-style relative attention bias embedding."""

    def __init__(self, dim=16):
        super().__init__()
        self.relative_attention_bias = nn.Embedding(8, 2)
        layer = nn.TransformerEncoderLayer(dim, 2, 2 * dim, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        gelu_layer = nn.TransformerEncoderLayer(dim, 2, 2 * dim, dropout=0.0, activation="gelu", batch_first=True)
        self.decoder = nn.TransformerEncoder(gelu_layer, 1, enable_nested_tensor=False)

    def example(self):
        return torch.randn(2, 6, 16, generator=torch.Generator().manual_seed(6))

    def forward(self, x):
        return self.decoder(self.encoder(x)) + self.relative_attention_bias.weight.sum()


MODELS = {
    "bert": BertLike,
    "whisper": WhisperLike,
    "vit": ViTLike,
    "convnext": ConvNeXtLike,
    "llama": LlamaLike,
    "t5": T5Like,
}


def build(name):
    """The model `name`, initialised the same way every time."""
    torch.manual_seed(0)
    return MODELS[name]().eval()
