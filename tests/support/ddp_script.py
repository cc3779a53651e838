"""A DDP training script as users hand it to torchrun: its arguments are its command line."""
import ddp_training

if __name__ == "__main__":
    ddp_training.script_main()
