//! Neural-network building blocks, as PyTorch's `torch.nn` spells them; for now the functional
//! forms ([`functional`]) of the ops a transformer spends its time in.

pub mod functional;
