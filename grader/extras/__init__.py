"""Optional operations around the grader's core (see README.md here): sharding, clusters, similarity, the LMS."""
