"""What the operator observes: what the watches told it (TrainJobs, their pods and Services), what a worker
pod's state means, and what a look outside them found."""
